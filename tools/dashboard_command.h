// `cohort dashboard RUN_DIR`: serves the live dashboard's page and /metrics for a run from its
// event log (RUN_DIR/events.jsonl), following the log while it grows (src/dashboard/).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace cohort::tools {

struct DashboardOptions {
  std::string run_dir;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;      // or COHORT_DASHBOARD_TOKEN
  bool no_follow = false;  // read the log once (default: re-read it every second while it grows)
};

/// Adds the `dashboard` command to `app`.
CLI::App* add_dashboard_command(CLI::App& app, DashboardOptions& options);

/// Serves until SIGINT or SIGTERM; returns the exit status.
int run_dashboard_command(const DashboardOptions& options);

}  // namespace cohort::tools
