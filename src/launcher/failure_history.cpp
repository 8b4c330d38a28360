// Restart notices and the failure history. See failure_history.h.
#include "launcher/failure_history.h"

#include <time.h>

#include <cstdio>

namespace cohort::launcher {
namespace {

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

std::string describe_failure(const RoundFailure& f) {
  return "rank " + std::to_string(f.who.rank) + " (node " + std::to_string(f.who.node_rank) + ", local rank " +
         std::to_string(f.who.local_rank) + ", pid " + std::to_string(f.who.pid) + ") " + f.how;
}

std::string restart_notice(const RoundFailure& f, int restart, int max_restarts) {
  return "cohort run: round " + std::to_string(f.round()) + " failed: " + describe_failure(f) +
         "; restarting the job (restart " + std::to_string(restart) + " of " + std::to_string(max_restarts) +
         ")\n";
}

std::string success_note(int restarts) {
  return "cohort run: job succeeded" + (restarts > 0 ? " after " + plural(restarts, "restart") : std::string()) +
         "\n";
}

std::string failure_history(const std::vector<RoundFailure>& history, int restarts, int max_restarts) {
  std::string out = "cohort run: failure history (" + plural(restarts, "restart") + ", --max-restarts " +
                    std::to_string(max_restarts) + "):\n";
  for (const auto& f : history) {
    out += "  round " + std::to_string(f.round()) + " at " + format_wall_time(f.time_ms) + ": " + describe_failure(f) +
           "\n";
  }
  return out;
}

std::string format_wall_time(int64_t ms) {
  const time_t seconds = static_cast<time_t>(ms / 1000);
  tm local{};
  localtime_r(&seconds, &local);
  char buf[32];
  size_t n = strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03d", static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace cohort::launcher
