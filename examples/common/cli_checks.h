// examples/common/cli_checks.h — what the examples add to CLI11 for their command lines.
//
// CLI11's PositiveNumber, NonNegativeNumber and Range let NaN through (every comparison with NaN
// is false) and take "inf"; a learning rate of nan then ends in a libtorch backtrace many lines
// long. kFinite refuses both. parse_command_line replaces CLI11_PARSE so that a bad flag is one
// line ("fashion_mnist: error: --lr: ...") and exit status 2, like every other bad input.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <optional>
#include <string>

namespace examples {

inline const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
      if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
      return "";
    },
    "FINITE");

/// Parses the command line; returns the exit status to end with (0 after --help, 2 after an
/// error printed as one line naming `program`), or nothing when the program should go on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what) c = c == '\n' ? ' ' : c;
    std::cerr << program << ": error: " << what << " (see " << program << " --help)" << std::endl;
    return 2;
  }
  return std::nullopt;
}

}  // namespace examples
