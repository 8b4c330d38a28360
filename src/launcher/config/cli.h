// launcher/config/cli.h — the `run` subcommand's command line: its options (CLI11) and where the
// program's own arguments begin, so that `cohort run -n 2 ./train --epochs 3` needs no `--`.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "launcher/config/options.h"

namespace cohort::launcher {

/// Adds `run` to `app`; parsing fills `options` (except options.command).
CLI::App* add_run_command(CLI::App& app, RunOptions& options);

/// Splits the command line (without argv[0]) at the program to run: the returned arguments are
/// for CLI11, `command` gets PROGRAM ARGS... . The program is the first argument after `run` that
/// is neither an option nor an option's value, or whatever follows a `--`.
std::vector<std::string> split_at_program(const std::vector<std::string>& args, const CLI::App& run,
                                          std::vector<std::string>& command);

}  // namespace cohort::launcher
