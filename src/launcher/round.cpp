// Rounds and the restart rule. See round.h.
#include "launcher/round.h"

#include <chrono>

namespace cohort::launcher {

RoundFailure round_failure(const WorkerFailure& f, int round) {
  RoundFailure r;
  r.who = f.who;
  r.who.restart_count = round;
  r.how = describe_exit(f.wait_status);
  r.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  r.summary = failure_summary(f);
  return r;
}

RoundEnd decide_round_end(const Outcome& outcome, int restarts, int max_restarts) {
  RoundEnd end;
  const bool worker_failure = outcome.kind == Outcome::worker_failed || outcome.kind == Outcome::peer_failed;
  end.restart = worker_failure && restarts < max_restarts;
  end.summary = outcome.summary;
  end.failure = outcome.failure;
  return end;
}

}  // namespace cohort::launcher
