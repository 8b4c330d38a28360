// The supervision loop. See supervisor.h.
#include "launcher/supervisor.h"

#include <poll.h>
#include <signal.h>

#include <chrono>
#include <set>

#include "launcher/coordinator.h"
#include "launcher/watch/flight_dumps.h"
#include "launcher/watch/hang_detector.h"
#include "launcher/watch/job_monitor.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/watch/watch.h"
#include "launcher/workers/spawn.h"  // reap_orphans
#include "launcher/workers/worker_group.h"

namespace cohort::launcher {

namespace {
constexpr int kTickMs = 500;  // upper bound between loop turns; events wake it at once

Outcome::Kind outcome_of(PeerEvent::Kind kind) {
  switch (kind) {
    case PeerEvent::failed: return Outcome::peer_failed;
    case PeerEvent::stopped: return Outcome::peer_stopped;
    case PeerEvent::repaired: return Outcome::peer_repaired;
    case PeerEvent::lost: break;
  }
  return Outcome::peer_lost;
}

bool in_group(WorkerGroup& workers, int64_t pid) {
  for (const Worker& w : workers.workers()) {
    if (w.pid == static_cast<pid_t>(pid)) return true;
  }
  return false;
}

// The messages that arrived: heartbeats to the hang rule (those of workers that ended, or of an
// earlier round's workers, are dropped), metrics and events to the monitor (this round's workers',
// also the last ones of a worker that just exited).
// `training` collects the pids whose heartbeats show training.
void take_messages(WorkerLink& link, WorkerGroup& workers, HangDetector& hangs, JobMonitor* monitor,
                   std::set<int64_t>& training) {
  const auto now = HangDetector::clock::now();
  for (WorkerMessage& m : link.receive()) {
    Worker* w = m.type == "heartbeat" ? workers.running(static_cast<pid_t>(m.pid)) : nullptr;
    if (w != nullptr) {
      hangs.heard(w->pid, m.heartbeat, now);
      w->rejoinable = m.heartbeat.rejoinable;
      if (m.heartbeat.training()) training.insert(m.pid);
    } else if (monitor && m.body.is_object() && in_group(workers, m.pid)) {
      monitor->worker_message(m.body);
    }
  }
}

}  // namespace

Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals, int round,
                  const Watch* watch, JobMonitor* monitor, const std::function<void()>& once_training) {
  WorkerLink* link = watch ? watch->link.get() : nullptr;
  HangDetector hangs(watch ? watch->hang_timeout_s : 0);
  bool reported_done = false;
  std::set<int64_t> training;
  bool training_told = !once_training;
  const auto started = std::chrono::steady_clock::now();
  reap_orphans();  // those that ended between rounds, their SIGCHLD drained elsewhere
  for (;;) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    workers.add_pollfds(fds);
    coordinator.add_pollfds(fds);
    if (link) fds.push_back({link->fd(), POLLIN, 0});  // heartbeats are timed when they arrive
    poll(fds.data(), fds.size(), kTickMs);

    for (int sig : signals.drain()) {
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return {Outcome::interrupted, "", sig, std::nullopt};
      // SIGCHLD: reap() below looks at every worker anyway; orphans our workers left (we may be
      // their subreaper) are waited for here, as they end (spawn.h).
      if (sig == SIGCHLD) reap_orphans();
    }
    workers.pump(fds);
    // Before reaping: a worker's last metrics (a NaN that made it stop) come before its failure.
    if (link) take_messages(*link, workers, hangs, monitor, training);
    if (link && workers.releasing()) workers.release_standby(*link);
    if (!training_told && (training.size() >= workers.workers().size() ||
                           std::chrono::steady_clock::now() - started > std::chrono::seconds(10))) {
      training_told = true;
      once_training();
    }
    if (monitor) monitor->tick();
    for (size_t i : workers.reap()) {
      const Worker& w = workers.workers()[i];
      hangs.forget(w.pid);  // a worker that finished is not silent
      if (!exited_ok(w.wait_status)) {
        RoundFailure failure = round_failure(workers.failure_of(w), round);
        return {Outcome::worker_failed, failure.summary, 0, failure};
      }
    }
    // --keep-survivors: node 0 grants repairs only while every node's workers could rejoin.
    bool rejoinable = !workers.workers().empty();
    for (const Worker& w : workers.workers()) rejoinable = rejoinable && !w.exited && w.rejoinable;
    coordinator.set_rejoinable(rejoinable);
    if (auto event = coordinator.handle(fds))
      return {outcome_of(event->kind), event->text, 0, event->failure, event->repair};
    if (!reported_done && workers.all_succeeded()) {
      reported_done = true;
      coordinator.local_done();
    }
    if (reported_done && coordinator.job_done()) return {Outcome::succeeded, "", 0, std::nullopt};

    // Hangs: a worker that stopped sending heartbeats, or stopped making progress, fails the round.
    if (!link) continue;
    if (auto hang = hangs.check(HangDetector::clock::now())) {
      Worker* w = workers.running(hang->pid);
      if (w == nullptr) continue;  // cannot happen: hangs only knows running workers
      WorkerFailure f = workers.failure_of(*w);
      f.hang = hang->how;
      f.flight_records = flight_record_pattern(watch->dump_dir, round);
      RoundFailure failure = round_failure(f, round);
      failure.how = describe_end(f);
      return {Outcome::worker_failed, failure.summary, 0, failure};
    }
  }
}

}  // namespace cohort::launcher
