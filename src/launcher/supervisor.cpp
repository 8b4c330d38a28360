// The supervision loop. See supervisor.h.
#include "supervisor.h"

#include <poll.h>
#include <signal.h>

#include "coordinator.h"
#include "signal_pipe.h"
#include "worker_group.h"

namespace cohort::launcher {

namespace {
constexpr int kTickMs = 500;  // upper bound between loop turns; events wake it at once

Outcome::Kind outcome_of(PeerEvent::Kind kind) {
  switch (kind) {
    case PeerEvent::failed: return Outcome::peer_failed;
    case PeerEvent::stopped: return Outcome::peer_stopped;
    case PeerEvent::lost: break;
  }
  return Outcome::peer_lost;
}

}  // namespace

Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals, int round) {
  bool reported_done = false;
  for (;;) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    workers.add_pollfds(fds);
    coordinator.add_pollfds(fds);
    poll(fds.data(), fds.size(), kTickMs);

    for (int sig : signals.drain()) {
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return {Outcome::interrupted, "", sig, std::nullopt};
      // SIGCHLD only wakes the loop; reap() below looks at every worker anyway.
    }
    workers.pump(fds);
    for (size_t i : workers.reap()) {
      const Worker& w = workers.workers()[i];
      if (!exited_ok(w.wait_status)) {
        RoundFailure failure = round_failure(workers.failure_of(w), round);
        return {Outcome::worker_failed, failure.summary, 0, failure};
      }
    }
    if (auto event = coordinator.handle(fds)) return {outcome_of(event->kind), event->text, 0, event->failure};
    if (!reported_done && workers.all_succeeded()) {
      reported_done = true;
      coordinator.local_done();
    }
    if (reported_done && coordinator.job_done()) return {Outcome::succeeded, "", 0, std::nullopt};
    // Hang detection goes here: compare each worker's last heartbeat and step with --hang-timeout.
  }
}

}  // namespace cohort::launcher
