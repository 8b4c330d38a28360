// `cohort`: the command line. Subcommands arrive with their issues (run, ckpt, dashboard);
// today it answers --version and --help.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cohort/version.h"

int main(int argc, char** argv) {
  CLI::App app{"cohort — distributed training for libtorch (C++) programs"};
  app.set_version_flag("--version", std::string("cohort ") + cohort::version());
  app.require_subcommand(0, 1);
  app.footer(
      "A training program joins its job with cohort::init(); start its ranks with torchrun-style\n"
      "variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or under mpirun / srun.\n"
      "Documentation: README.md and docs/ in the source tree.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (argc == 1) std::cout << app.help();
  return 0;
}
