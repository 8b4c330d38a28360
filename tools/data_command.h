// `cohort data prepare|verify|inspect`: prepared data sets (docs/data.md), without libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cohort::tools {

struct DataOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer = "bytes";
  uint64_t vocab = 0;
  int threads = 0;
  std::string shard_bytes = "256MiB";
  uint64_t chunk_bytes = 4 << 20;
  uint64_t records = 0;
  bool idx = false;
  std::string dir;  // verify, inspect
};

/// Adds the `data` command with its subcommands to `app`.
CLI::App* add_data_command(CLI::App& app, DataOptions& options);

/// Runs whichever subcommand was parsed; returns the exit status.
int run_data_command(const CLI::App& data, const DataOptions& options);

}  // namespace cohort::tools
