// launcher/watch/job_monitor.h — the agent's part in monitoring: what it tells the hub, and where the hub is.
//
// The leading agent (node 0: the only one, the static job's node 0, the elastic rendezvous host)
// owns the job's Hub (hub/hub.h): it logs to <run_dir>/events.jsonl and serves the dashboard
// and /metrics (dashboard/server.h) unless --no-dashboard. Its own workers' "metrics" and "event"
// messages (from the worker link), those other nodes forward, and the launcher's events (start,
// rendezvous, round_started, failure, restart, finished) all go into it; tick() drives the stall
// rule. Another node's agent has no hub: it forwards its workers' messages to node 0 over the
// agents' channel, never waiting (Coordinator::forward_monitor; dropped when the link is backed up).
// Nothing here may stop the job: a run directory or a log that cannot be written is a warning.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "launcher/coordinator.h"
#include "launcher/config/options.h"
#include "launcher/round.h"
#include "launcher/watch/machine_load.h"

namespace cohort::hub {
class Hub;
}

namespace cohort::launcher {

class JobMonitor {
 public:
  /// The leading agent's monitor: makes the run directory (printed on stderr), the hub and the
  /// dashboard (its URL printed and written to <run_dir>/dashboard.url), takes the other nodes'
  /// forwarded messages from `coordinator`, and logs "start" and "rendezvous". Throws
  /// cohort::ConfigError when the dashboard cannot listen at an explicitly given --dashboard-port.
  static std::unique_ptr<JobMonitor> lead(const RunOptions& options, Coordinator& coordinator, const Assignment& first);
  /// Another node's: forwards its workers' messages through `coordinator`.
  static std::unique_ptr<JobMonitor> follow(Coordinator& coordinator);
  ~JobMonitor();

  bool leading() const { return hub_ != nullptr; }
  hub::Hub* hub() const { return hub_.get(); }

  /// A worker's "metrics" or "event" message from this node's worker link.
  void worker_message(const nlohmann::json& message);
  /// About twice a second from the supervision loop: the stall rule, and every second a sample of
  /// the machine's load for the log (machine_load.h).
  void tick();
  /// A round's workers are about to start (the node rank of an elastic job may change with it).
  void round_started(const Assignment& assignment);
  /// The round ended without success: a worker failure (here or elsewhere) or a lost node.
  void round_failed(const Outcome& outcome);
  /// The job starts again (`notice`: what the agent printed); `restarts`: the count after it.
  void restarting(const std::string& notice, int restarts);
  /// A failed worker was replaced alone and the others rejoin (--keep-survivors): the hub counts
  /// the recovery from here, as from a round's start.
  /// `spare`: what replaced the worker, when this node did (repair.h: "forked", "warm", "new").
  void replaced(const std::string& notice, int rank, int generation, int restarts, const std::string& spare = "");
  /// The job is over with this exit code; closes the dashboard's live streams.
  void finished(int exit_code);

 private:
  explicit JobMonitor(Coordinator& coordinator);
  Coordinator& coordinator_;
  int node_rank_ = 0;
  std::unique_ptr<hub::Hub> hub_;
  struct Server;
  std::unique_ptr<Server> server_;  // destroyed before the hub it reads
  bool finished_ = false;
  MachineLoadSampler machine_;  // the leading agent's: a "machine" log line a second
  double next_machine_sample_ = 0;
};

/// The run directory: --run-dir, else --log-dir, else cohort-runs/<YYYYmmdd-HHMMSS>-<pid> in the
/// current directory, made absolute.
std::string run_directory(const RunOptions& options);

}  // namespace cohort::launcher
