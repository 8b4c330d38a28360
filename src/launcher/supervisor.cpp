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
}

Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals) {
  bool reported_done = false;
  for (;;) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    workers.add_pollfds(fds);
    coordinator.add_pollfds(fds);
    poll(fds.data(), fds.size(), kTickMs);

    for (int sig : signals.drain()) {
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return {Outcome::interrupted, "", sig};
      // SIGCHLD only wakes the loop; reap() below looks at every worker anyway.
    }
    workers.pump(fds);
    for (size_t i : workers.reap()) {
      const Worker& w = workers.workers()[i];
      if (!exited_ok(w.wait_status)) return {Outcome::worker_failed, failure_summary(workers.failure_of(w)), 0};
    }
    if (auto event = coordinator.handle(fds)) {
      return {event->kind == PeerEvent::failed ? Outcome::peer_failed : Outcome::peer_lost, event->text, 0};
    }
    if (!reported_done && workers.all_succeeded()) {
      reported_done = true;
      coordinator.local_done();
    }
    if (reported_done && coordinator.job_done()) return {Outcome::succeeded, "", 0};
  }
}

}  // namespace cohort::launcher
