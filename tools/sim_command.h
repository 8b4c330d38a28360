// `cohort sim`: the cluster simulator (src/sim/) on the command line: run, params, optimum,
// calibrate, predict, serve (docs/sim.md).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace cohort::tools {

struct SimOptions {
  std::string preset;
  std::vector<std::string> param_files;   // JSON objects of parameters (or a calibration's output)
  std::vector<std::string> sets;          // key=value
  std::vector<std::string> at;            // run: SECONDS:key=value, a change while it runs
  bool pretty = false;
  bool timeline = false;
  bool no_series = false;
  bool json = false;                      // params: the table as JSON
  std::vector<std::string> run_dirs;      // calibrate / predict
  std::string output;                     // calibrate: where the fit goes (default: stdout)
  int cores = 0;                          // calibrate: the machine's cores (0: this one's)
  bool shared_machine = false;            // calibrate: the runs' nodes shared the machine's cores
  bool allow_load = false;                // calibrate: fit runs that other work on the machine slowed
  std::string calibration;                // predict: the calibration file
  double tolerance_step = 0.10;           // predict: relative error allowed on the step time
  double tolerance_recovery = 0.20;       // ... on the recovery time
  std::string host = "127.0.0.1";         // serve
  int port = 0;
  std::string token;
};

/// Adds `sim` and its subcommands to `app`; returns the `sim` command.
CLI::App* add_sim_command(CLI::App& app, SimOptions& options);
/// Runs the subcommand that was parsed; returns the exit status.
int run_sim_command(CLI::App& sim, const SimOptions& options);

/// `cohort sim pipeline` (sim_pipeline.cpp): a pipeline schedule's step at given costs.
CLI::App* add_sim_pipeline_command(CLI::App& sim);
bool sim_pipeline_parsed();
int run_sim_pipeline();

}  // namespace cohort::tools
