// Collecting flight records from a hung round's workers. See flight_dumps.h.
#include "launcher/watch/flight_dumps.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "launcher/failure_history.h"
#include "launcher/watch/hang_detector.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/watch/watch.h"
#include "launcher/workers/worker_group.h"
#include "runtime/json_fields.h"

namespace cohort::launcher {
namespace {

using clock = std::chrono::steady_clock;
constexpr auto kDumpWait = std::chrono::seconds(3);  // per phase; a dump takes milliseconds

struct Target {
  size_t index;  // in the group
  std::string path;
  bool stopped;
  bool written = false;
};

// Stopped by a signal (SIGSTOP, SIGTSTP) or by a tracer: state T or t in /proc/<pid>/stat.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'T' || line[paren + 2] == 't');
}

// Waits until every target of `phase` (stopped or not) has written its file, has exited or the
// deadline passed, relaying output meanwhile. Returns an interrupt signal, or 0.
int wait_for_records(std::vector<Target>& targets, bool phase, WorkerGroup& workers, SignalPipe& signals) {
  const auto deadline = clock::now() + kDumpWait;
  for (;;) {
    bool waiting = false;
    for (auto& t : targets) {
      if (t.stopped != phase || t.written) continue;
      t.written = ::access(t.path.c_str(), F_OK) == 0;  // the worker renames a complete file into place
      if (!t.written && !workers.workers()[t.index].exited) waiting = true;
    }
    if (!waiting || clock::now() >= deadline) return 0;
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    workers.add_pollfds(fds);
    poll(fds.data(), fds.size(), 20);
    for (int sig : signals.drain()) {
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return sig;
    }
    workers.pump(fds);
    workers.reap();
  }
}

}  // namespace

std::string flight_record_path(const std::string& dir, int round, int rank, int generation) {
  const std::string gen = generation > 0 ? "-gen" + std::to_string(generation) : "";
  return dir + "/flight-round" + std::to_string(round) + gen + "-rank" + std::to_string(rank) + ".json";
}

std::string flight_record_pattern(const std::string& dir, int round) {
  return dir + "/flight-round" + std::to_string(round) + "-rank<R>.json";
}

namespace {

// Both cases below: `generation` > 0 is a repair in place, which stops no worker and so asks only
// those that are not stopped.
int collect_records(const Outcome& outcome, WorkerGroup& workers, const Watch& watch, int round, int generation,
                    double stop_grace_s, SignalPipe& signals) {
  const bool worker_failure = outcome.kind == Outcome::worker_failed || outcome.kind == Outcome::peer_failed;
  if (!worker_failure || !outcome.failure || !is_hang(outcome.failure->how) || !watch.link) return 0;
  const bool in_place = generation > 0;
  WorkerLink& link = *watch.link;
  link.receive();  // addresses of workers whose first heartbeat came in just now
  const std::string reason = describe_failure(*outcome.failure);

  // 1. Ask everyone; note who is stopped.
  std::vector<Target> targets;
  for (size_t i = 0; i < workers.workers().size(); ++i) {
    const Worker& w = workers.workers()[i];
    if (w.exited || !link.knows(w.pid)) continue;
    Target t{i, flight_record_path(watch.dump_dir, round, w.place.job.rank, generation), is_stopped(w.pid)};
    if (in_place && t.stopped) continue;  // it is replaced, not continued
    ::unlink(t.path.c_str());  // a record of an earlier run in the same --log-dir must not count
    // dump_text: a --log-dir that is not UTF-8 must not throw here, in the middle of a hang.
    link.request(w.pid, cohort::detail::dump_text(nlohmann::json{{"type", "dump"}, {"path", t.path}, {"reason", reason}}));
    targets.push_back(t);
  }
  if (targets.empty()) return 0;

  // 2. The running workers answer at once.
  int interrupt = wait_for_records(targets, /*phase=*/false, workers, signals);

  // 3, 4. The stopped ones: first make sure no peer of this node can complete a collective with
  // them, then continue them; their request is waiting for them.
  std::vector<size_t> others;
  std::vector<pid_t> stopped;
  for (size_t i = 0; i < workers.workers().size(); ++i) others.push_back(i);
  for (const auto& t : targets) {
    if (!t.stopped) continue;
    stopped.push_back(workers.workers()[t.index].pid);
    others.erase(std::find(others.begin(), others.end(), t.index));
  }
  if (!stopped.empty() && interrupt == 0) {
    interrupt = workers.stop(others, stop_grace_s, signals);
    for (pid_t pid : stopped) ::kill(-pid, SIGCONT);
    if (interrupt == 0) interrupt = wait_for_records(targets, /*phase=*/true, workers, signals);
  }

  // One line: what was written, and who wrote nothing.
  std::string written, missing;
  for (const auto& t : targets) {
    const int rank = workers.workers()[t.index].place.job.rank;
    if (t.written) {
      written += (written.empty() ? "" : ", ") + t.path;
    } else {
      missing += (missing.empty() ? "rank " : ", rank ") + std::to_string(rank);
    }
  }
  std::string note = "cohort run: flight records of round " + std::to_string(round) +
                     (in_place ? " before generation " + std::to_string(generation) : "") + ": " +
                     (written.empty() ? "none" : written);
  if (!missing.empty()) note += "; none from " + missing;
  std::cerr << note << "\n" << std::flush;
  return interrupt;
}

}  // namespace

int dump_flight_records(const Outcome& outcome, WorkerGroup& workers, const Watch& watch, int round,
                        double stop_grace_s, SignalPipe& signals) {
  return collect_records(outcome, workers, watch, round, 0, stop_grace_s, signals);
}

int dump_flight_records_in_place(const Outcome& outcome, WorkerGroup& workers, const Watch& watch, int round,
                                 int generation, SignalPipe& signals) {
  return collect_records(outcome, workers, watch, round, generation, 0, signals);
}

}  // namespace cohort::launcher
