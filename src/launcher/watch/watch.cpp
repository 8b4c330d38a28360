// The agent's watch over its workers. See watch.h.
#include "launcher/watch/watch.h"

#include <algorithm>
#include <iostream>
#include <string>

namespace cohort::launcher {

std::vector<std::string> Watch::worker_variables() const {
  if (!link) return {};
  return {"COHORT_AGENT_SOCKET=" + link->socket_path(), "COHORT_HEARTBEAT_MS=" + std::to_string(heartbeat_ms)};
}

Watch open_watch(const RunOptions& o) {
  Watch w;
  w.hang_timeout_s = o.hang_timeout_s;
  // A quarter of the timeout (at most 1 s): a silent worker is then one that missed three or more
  // heartbeats, never one whose next heartbeat is simply due.
  if (o.hang_timeout_s > 0) w.heartbeat_ms = std::clamp(static_cast<int>(o.hang_timeout_s * 250), 50, 1000);
  try {
    w.link = std::make_unique<WorkerLink>();
  } catch (const std::exception& e) {
    if (o.hang_timeout_s > 0) {
      std::string why = e.what();
      if (why.rfind("cohort: ", 0) == 0) why.erase(0, 8);
      std::cerr << "cohort run: warning: hang detection is off: " << why << std::endl;
    }
    return w;
  }
  w.dump_dir = o.log_dir.empty() ? w.link->dir() : o.log_dir;
  return w;
}

}  // namespace cohort::launcher
