// Warm spares: starting, matching and discarding the next round's workers. See standby.h.
#include "launcher/workers/standby.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "launcher/workers/worker_link.h"

namespace cohort::launcher {
namespace {

// The variables are what the worker sees: equal variables, equal place.
bool same_place(const WorkerPlace& a, const WorkerPlace& b) { return worker_variables(a) == worker_variables(b); }

}  // namespace

StandbyWorkers::~StandbyWorkers() { discard(); }

void StandbyWorkers::start(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
                           const std::vector<std::string>& extra_env) {
  discard();
  top_up(places, command, extra_env);  // none is covered now: one per place
}

bool StandbyWorkers::ready_for(const std::vector<WorkerPlace>& places, const WorkerLink& link) {
  if (standby_.empty() || places.size() != standby_.size()) return false;
  for (size_t i = 0; i < places.size(); ++i)
    if (!same_place(places[i], standby_[i].place)) return false;
  for (StandbyProcess& s : standby_) {
    int status = 0;
    if (::waitpid(s.process.pid, &status, WNOHANG) == s.process.pid) {  // it ended standing by
      s.process.pid = -1;
      if (!warned_ && WIFEXITED(status)) {  // one killed by a signal says nothing about the program
        warned_ = true;
        std::cerr << "cohort run: warning: a warm spare exited (code " << WEXITSTATUS(status)
                  << ") before its round began; --warm-spares needs a program that calls cohort::init() before "
                     "it trains (this restart starts new workers)"
                  << std::endl;
      }
      return false;
    }
    if (!link.knows(s.process.pid)) return false;  // still starting: not waiting in init() yet
  }
  return true;
}

std::vector<StandbyProcess> StandbyWorkers::take() { return std::exchange(standby_, {}); }

void StandbyWorkers::top_up(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
                            const std::vector<std::string>& extra_env) {
  settle_forks();
  // Spares for places of an earlier round (a fork answered after the round restarted) go.
  for (auto it = standby_.begin(); it != standby_.end();) {
    if (std::any_of(places.begin(), places.end(), [&](const WorkerPlace& p) { return same_place(p, it->place); })) {
      ++it;
    } else {
      kill_and_reap(it->process);
      it = standby_.erase(it);
    }
  }
  for (const WorkerPlace& place : places) {
    if (!covered(place, /*or_forking=*/true)) standby_.push_back({place, start_one(place, command, extra_env)});
  }
}

SpawnedProcess StandbyWorkers::start_one(const WorkerPlace& place, const std::vector<std::string>& command,
                                         const std::vector<std::string>& extra_env) {
  std::vector<std::string> extra = extra_env;
  extra.push_back("COHORT_STANDBY=1");
  return spawn_worker(command, worker_environment(current_environment(), place, extra));
}

bool StandbyWorkers::covered(const WorkerPlace& place, bool or_forking) const {
  for (const StandbyProcess& s : standby_)
    if (same_place(s.place, place)) return true;
  if (or_forking)
    for (const PendingFork& f : pending_)
      if (same_place(f.place, place)) return true;
  return false;
}

bool StandbyWorkers::release_forking(const WorkerPlace& place, pid_t pid, int generation) {
  if (fork_link_ == nullptr) return false;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return false;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return false;
  }
  const std::string go = R"({"type":"go","fork":true,"generation":)" + std::to_string(generation) + "}";
  const bool sent = fork_link_->request(pid, go, {out[1], err[1]});
  ::close(out[1]);  // the successor holds its own copies
  ::close(err[1]);
  if (!sent) {
    ::close(out[0]);
    ::close(err[0]);
    return false;
  }
  pending_.push_back({place, pid, out[0], err[0], std::chrono::steady_clock::now()});
  return true;
}

void StandbyWorkers::settle_forks() {
  if (fork_link_ == nullptr) return;
  // Successors of forks given up on (discard()): stopped as soon as their spare names them.
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    if (auto answer = fork_link_->take_fork_answer(*it)) {
      SpawnedProcess p{answer->spare, -1, -1};
      // Only a live child: one that ended before it was named was reaped as an orphan (spawn.h),
      // and its pid may be another process's by now.
      if (p.pid > 0 && ::waitpid(p.pid, nullptr, WNOHANG) == 0) kill_and_reap(p);
      it = abandoned_.erase(it);
    } else {
      ++it;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    const PendingFork f = *it;
    const std::optional<ForkAnswer> answer = fork_link_->take_fork_answer(f.released);
    if (!answer && now - f.asked < kForkAnswerTimeout) {
      ++it;
      continue;
    }
    it = pending_.erase(it);
    SpawnedProcess p{answer ? answer->spare : -1, f.stdout_fd, f.stderr_fd};
    // Only a live child of ours can be a spare: the agent reaps and stops it like those it starts.
    const bool alive_child = p.pid > 0 && ::waitpid(p.pid, nullptr, WNOHANG) == 0;
    if (alive_child && !covered(f.place, /*or_forking=*/false)) {
      own_child(p.pid);  // reap_orphans() leaves it to us now (spawn.h)
      ::fcntl(p.stdout_fd, F_SETFL, O_NONBLOCK);
      ::fcntl(p.stderr_fd, F_SETFL, O_NONBLOCK);
      standby_.push_back({f.place, p, /*forked=*/true});
      continue;
    }
    if (!answer) abandoned_.push_back(f.released);
    if (!alive_child) {
      const std::string why = !answer                  ? "no answer within " + std::to_string(kForkAnswerTimeout.count()) + " s"
                              : !answer->refused.empty() ? answer->refused
                                                         : "its successor (pid " + std::to_string(p.pid) + ") is gone";
      std::cerr << "cohort run: warning: the warm spare released as rank " << f.place.job.rank
                << " did not fork the next spare (" << why << "); the next spare will be a new process" << std::endl;
      p.pid = -1;
    }
    kill_and_reap(p);
  }
}

void StandbyWorkers::kill_and_reap(SpawnedProcess& p) {
  if (p.pid > 0) {
    ::kill(-p.pid, SIGKILL);  // its process group: the worker and whatever it started
    ::kill(p.pid, SIGKILL);   // a successor forked a moment ago may not lead its group yet
    ::waitpid(p.pid, nullptr, 0);
  }
  for (int fd : {p.stdout_fd, p.stderr_fd})
    if (fd >= 0) ::close(fd);
  p = SpawnedProcess{};
}

std::optional<StandbyProcess> StandbyWorkers::take_for(const WorkerPlace& place, const WorkerLink& link) {
  settle_forks();
  for (size_t i = 0; i < standby_.size(); ++i) {
    StandbyProcess& s = standby_[i];
    if (!same_place(s.place, place)) continue;
    int status = 0;
    const bool ended = ::waitpid(s.process.pid, &status, WNOHANG) == s.process.pid;
    if (ended) {  // it died standing by: top_up starts another
      ::close(s.process.stdout_fd);
      ::close(s.process.stderr_fd);
      standby_.erase(standby_.begin() + static_cast<std::ptrdiff_t>(i));
      return std::nullopt;
    }
    // Still starting: with forking, it is further along than a new process would be (the group
    // releases it once it stands by, and it forks the next spare then); without, a fresh process.
    if (!link.knows(s.process.pid) && !forking()) return std::nullopt;
    StandbyProcess p = s;
    standby_.erase(standby_.begin() + static_cast<std::ptrdiff_t>(i));
    return p;
  }
  return std::nullopt;
}

void StandbyWorkers::discard() {
  settle_forks();
  for (StandbyProcess& s : standby_) kill_and_reap(s.process);
  standby_.clear();
  for (PendingFork& f : pending_) {  // the successor, once named, is stopped (settle_forks())
    SpawnedProcess pipes{-1, f.stdout_fd, f.stderr_fd};
    kill_and_reap(pipes);
    abandoned_.push_back(f.released);
  }
  pending_.clear();
}

}  // namespace cohort::launcher
