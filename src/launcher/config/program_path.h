// launcher/config/program_path.h — finding the program to run before any worker starts, so that a typo
// is one clear error instead of N workers failing with exit code 127.
#pragma once

#include <string>

namespace cohort::launcher {

/// The path execv() will run for `program`: itself when it contains a '/', else the first
/// executable match on PATH (as a shell would find it). Throws cohort::ConfigError:
/// "program 'x' not found" / "program 'x' is not executable" / "... is a directory".
std::string resolve_program(const std::string& program);

}  // namespace cohort::launcher
