// launcher/watch/watch.h — how the agent watches its workers beyond their exit status: the worker link,
// the hang timeout, and where flight records go. Made once per `cohort run`, used by every round.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/config/options.h"
#include "launcher/workers/worker_link.h"

namespace cohort::launcher {

struct Watch {
  std::unique_ptr<WorkerLink> link;  // null when no run directory could be made (then no heartbeats)
  double hang_timeout_s = 0;         // --hang-timeout; 0: hangs are not detected
  int heartbeat_ms = 1000;           // the workers' heartbeat interval (COHORT_HEARTBEAT_MS)
  std::string dump_dir;              // flight records: --log-dir, else the run directory

  /// COHORT_AGENT_SOCKET and COHORT_HEARTBEAT_MS for every worker (none without a link).
  std::vector<std::string> worker_variables() const;
};

/// Opens the worker link. When that fails the job runs without heartbeats: with --hang-timeout a
/// warning says so on stderr.
Watch open_watch(const RunOptions& options);

}  // namespace cohort::launcher
