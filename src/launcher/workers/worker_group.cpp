// Starting, watching and stopping one node's workers. See worker_group.h.
#include "launcher/workers/worker_group.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "cohort/error.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/workers/spawn.h"
#include "launcher/workers/worker_link.h"

namespace cohort::launcher {
namespace {

void make_dirs(const std::string& dir) {
  std::string path;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    path = dir.substr(0, pos);
    if (!path.empty() && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      throw ConfigError(-1, "cannot create the log directory " + dir + ": " + std::strerror(errno));
    }
  }
}

}  // namespace

WorkerGroup::~WorkerGroup() {
  for (auto& w : workers_) {
    if (!w.exited && w.pid > 0) {
      kill(-w.pid, SIGKILL);
      waitpid(w.pid, nullptr, 0);
    }
    for (int& fd : w.fds) {
      if (fd >= 0) close(fd);
    }
  }
}

void WorkerGroup::start(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
                        const std::string& log_dir, size_t tail_lines, const std::vector<std::string>& extra_env) {
  if (!log_dir.empty()) make_dirs(log_dir);
  const std::vector<std::string> base = current_environment();
  workers_.reserve(places.size());
  for (const WorkerPlace& place : places) {
    add(place, spawn_worker(command, worker_environment(base, place, extra_env)), log_dir, tail_lines);
  }
}

void WorkerGroup::adopt(std::vector<StandbyProcess> standby, const std::string& log_dir, size_t tail_lines) {
  if (!log_dir.empty()) make_dirs(log_dir);
  for (const StandbyProcess& s : standby) {
    add(s.place, s.process, log_dir, tail_lines);
    unreleased_.push_back({s.process.pid, false});
  }
}

void WorkerGroup::release_standby(WorkerLink& link, int generation) {
  if (generation > 0) release_generation_ = generation;
  const std::string go = release_generation_ > 0
                             ? R"({"type":"go","generation":)" + std::to_string(release_generation_) + "}"
                             : std::string(R"({"type":"go"})");
  std::vector<Unreleased> still;
  for (const Unreleased& u : unreleased_) {
    const Worker* w = running(u.pid);
    if (w == nullptr) continue;  // it died standing by: reap() reports it
    const bool forks = u.fork && forker_ != nullptr && forker_->forking() && release_generation_ > 0;
    const bool sent = link.knows(u.pid) && (forks ? forker_->release_forking(w->place, u.pid, release_generation_)
                                                  : link.request(u.pid, go));
    if (!sent) still.push_back(u);
  }
  unreleased_ = std::move(still);
}

void WorkerGroup::add(const WorkerPlace& place, const SpawnedProcess& process, const std::string& log_dir,
                      size_t tail_lines) {
  Worker w;
  w.place = place;
  std::string log_path = log_dir.empty() ? "" : log_dir + "/rank" + std::to_string(place.job.rank) + ".log";
  w.relay = std::make_unique<OutputRelay>(place.job.rank, log_path, tail_lines);
  w.pid = process.pid;
  w.fds[0] = process.stdout_fd;
  w.fds[1] = process.stderr_fd;
  workers_.push_back(std::move(w));
}

void WorkerGroup::replace(size_t index, const SpawnedProcess& process, bool standby, bool fork) {
  Worker& w = workers_[index];
  for (int& fd : w.fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  w.pid = process.pid;
  w.fds[0] = process.stdout_fd;
  w.fds[1] = process.stderr_fd;
  w.exited = false;
  w.wait_status = 0;
  w.rejoinable = false;
  w.replacement = true;
  if (standby) unreleased_.push_back({process.pid, fork});
}

void WorkerGroup::add_pollfds(std::vector<pollfd>& fds) const {
  for (const auto& w : workers_) {
    for (int fd : w.fds) {
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
  }
}

void WorkerGroup::pump(const std::vector<pollfd>& ready) {
  for (const pollfd& p : ready) {
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    for (auto& w : workers_) {
      for (int s = 0; s < 2; ++s) {
        if (w.fds[s] != p.fd) continue;
        if (!w.relay->pump(w.fds[s], static_cast<OutputRelay::Stream>(s))) {
          close(w.fds[s]);
          w.fds[s] = -1;
        }
      }
    }
  }
}

void WorkerGroup::drain(Worker& w) {
  for (int s = 0; s < 2; ++s) {
    if (w.fds[s] >= 0 && !w.relay->pump(w.fds[s], static_cast<OutputRelay::Stream>(s))) {
      close(w.fds[s]);
      w.fds[s] = -1;
    }
  }
  w.relay->flush_partial();
}

std::vector<size_t> WorkerGroup::reap() {
  std::vector<size_t> ended;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (w.exited) continue;
    int status = 0;
    pid_t r = waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      w.exited = true;
      w.wait_status = status;
      drain(w);
      ended.push_back(i);
    }
  }
  return ended;
}

bool WorkerGroup::all_exited() const {
  for (const auto& w : workers_) {
    if (!w.exited) return false;
  }
  return true;
}

bool WorkerGroup::all_exited(const std::vector<size_t>& which) const {
  for (size_t i : which) {
    if (!workers_[i].exited) return false;
  }
  return true;
}

Worker* WorkerGroup::running(pid_t pid) {
  for (auto& w : workers_) {
    if (w.pid == pid && !w.exited) return &w;
  }
  return nullptr;
}

bool WorkerGroup::all_succeeded() const {
  for (const auto& w : workers_) {
    if (!w.exited || !exited_ok(w.wait_status)) return false;
  }
  return true;
}

WorkerFailure WorkerGroup::failure_of(const Worker& w) const {
  WorkerFailure f;
  f.who.rank = w.place.job.rank;
  f.who.world_size = w.place.job.world_size;
  f.who.local_rank = w.place.job.local_rank;
  f.who.node_rank = w.place.job.node_rank;
  f.who.restart_count = w.place.job.restart_count;
  f.who.pid = w.pid;
  f.wait_status = w.wait_status;
  f.last_lines = w.relay->tail();
  return f;
}

void WorkerGroup::kill_groups(const std::vector<size_t>& which, int sig) {
  for (size_t i : which) {
    const Worker& w = workers_[i];
    // The group outlives its leader while the worker's own children live; the leader's pid is
    // not reused before it is reaped, so signalling -pid reaches only this worker's processes.
    if (w.exited) continue;
    kill(-w.pid, sig);
    // A stopped process (SIGSTOP, a hang test) keeps SIGTERM pending until it is continued: let
    // it act on the signal now rather than wait out the grace period.
    if (sig == SIGTERM) kill(-w.pid, SIGCONT);
  }
}

int WorkerGroup::stop(double grace_s, SignalPipe& signals) {
  std::vector<size_t> all(workers_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return stop(all, grace_s, signals);
}

int WorkerGroup::stop(const std::vector<size_t>& which, double grace_s, SignalPipe& signals) {
  using clock = std::chrono::steady_clock;
  int interrupt = 0;
  kill_groups(which, SIGTERM);
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  reap();
  while (!all_exited(which) && clock::now() < deadline) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    add_pollfds(fds);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(std::max<int64_t>(left, 0), 100)));
    bool hurry = false;
    for (int sig : signals.drain()) {
      if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;
      hurry = true;
      if (interrupt == 0) interrupt = sig;
    }
    pump(fds);
    reap();
    if (hurry) break;  // a (second) Ctrl-C: no more grace
  }
  kill_groups(which, SIGKILL);
  for (size_t i : which) {
    Worker& w = workers_[i];
    if (w.exited) continue;
    waitpid(w.pid, &w.wait_status, 0);
    w.exited = true;
    drain(w);
  }
  // Children the workers left behind in their groups (the leaders are reaped, the groups may not be).
  for (size_t i : which) kill(-workers_[i].pid, SIGKILL);
  return interrupt;
}

}  // namespace cohort::launcher
