// launcher/watch/hang_detector.h — the hang rule of `cohort run --hang-timeout S`.
//
// A worker counts once it has sent a heartbeat (src/runtime/agent_link/agent_link.h); one that never does
// (a program without cohort::init) is never judged. A counted worker is hung when
//   * no heartbeat arrived from it for S seconds (stopped by SIGSTOP, frozen, starved), or
//   * it is training (reported a step or finished a DDP iteration) and none of its counters —
//     reported step, report_step() calls, DDP iterations, completed collectives — moved for S
//     seconds (stuck in a collective, a deadlock, a loop that never ends).
// Before its first step a worker may take as long as it likes (loading data, building the model).
// When one worker crosses the line the others usually stall with it (they wait for it in a
// collective), so the blame goes to the likeliest cause among those stalled for at least S/2: a
// silent worker first (longest silence), else one that is not inside a collective (it is stuck in
// its own code), else the one with the fewest completed collectives, else the longest stall; and
// the hang is declared once that worker has crossed the line itself (at most a heartbeat later).
// Pure: times are passed in, so the rule is tested without processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "launcher/workers/worker_link.h"

namespace cohort::launcher {

class HangDetector {
 public:
  using clock = std::chrono::steady_clock;

  /// timeout_s <= 0: never reports a hang.
  explicit HangDetector(double timeout_s) : timeout_s_(timeout_s) {}

  /// A heartbeat from `pid` arrived at `now`.
  void heard(pid_t pid, const Heartbeat& heartbeat, clock::time_point now);
  /// The worker ended (a worker that finished early must not count as silent).
  void forget(pid_t pid) { seen_.erase(pid); }
  bool heard_from(pid_t pid) const { return seen_.count(pid) != 0; }

  struct Hang {
    pid_t pid = 0;
    std::string how;  // "made no progress for 3.2 s and sent no heartbeat for 3.2 s (...)"
  };
  /// The hung worker to blame, if any worker crossed the line at `now`.
  std::optional<Hang> check(clock::time_point now) const;

 private:
  struct Seen {
    Heartbeat last;
    clock::time_point heard_at;     // last heartbeat
    clock::time_point progress_at;  // last heartbeat whose counters differed from the one before
  };
  double timeout_s_;
  std::map<pid_t, Seen> seen_;
};

/// Whether a round's failure is a hang (its `how` comes from HangDetector).
bool is_hang(const std::string& how);

}  // namespace cohort::launcher
