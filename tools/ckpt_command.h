// `cohort ckpt list|verify|inspect`: look at checkpoints without libtorch (src/checkpoint/).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace cohort::tools {

struct CkptOptions {
  std::string path;
  bool json = false;
};

/// Adds the `ckpt` command with its three subcommands to `app`.
CLI::App* add_ckpt_command(CLI::App& app, CkptOptions& options);

/// Runs whichever subcommand was parsed; returns the exit status.
int run_ckpt_command(const CLI::App& ckpt, const CkptOptions& options);

}  // namespace cohort::tools
