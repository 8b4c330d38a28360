// Warm spares: starting, matching and discarding the next round's workers. See standby.h.
#include "launcher/workers/standby.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <utility>

#include "launcher/workers/worker_link.h"

namespace cohort::launcher {

StandbyWorkers::~StandbyWorkers() { discard(); }

void StandbyWorkers::start(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
                           const std::vector<std::string>& extra_env) {
  discard();
  top_up(places, command, extra_env);  // none is covered now: one per place
}

bool StandbyWorkers::ready_for(const std::vector<WorkerPlace>& places, const WorkerLink& link) {
  if (standby_.empty() || places.size() != standby_.size()) return false;
  for (size_t i = 0; i < places.size(); ++i) {
    // The variables are what the worker sees: equal variables, equal place.
    if (worker_variables(places[i]) != worker_variables(standby_[i].place)) return false;
  }
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
  const std::vector<std::string> base = current_environment();
  std::vector<std::string> extra = extra_env;
  extra.push_back("COHORT_STANDBY=1");
  for (const WorkerPlace& place : places) {
    bool covered = false;
    for (const StandbyProcess& s : standby_) covered = covered || worker_variables(s.place) == worker_variables(place);
    if (!covered) standby_.push_back({place, spawn_worker(command, worker_environment(base, place, extra))});
  }
}

std::optional<SpawnedProcess> StandbyWorkers::take_for(const WorkerPlace& place, const WorkerLink& link) {
  for (size_t i = 0; i < standby_.size(); ++i) {
    StandbyProcess& s = standby_[i];
    if (worker_variables(s.place) != worker_variables(place)) continue;
    int status = 0;
    const bool ended = ::waitpid(s.process.pid, &status, WNOHANG) == s.process.pid;
    if (ended) {  // it died standing by: top_up starts another
      ::close(s.process.stdout_fd);
      ::close(s.process.stderr_fd);
      standby_.erase(standby_.begin() + static_cast<std::ptrdiff_t>(i));
      return std::nullopt;
    }
    if (!link.knows(s.process.pid)) return std::nullopt;  // still starting: a fresh process instead
    SpawnedProcess p = s.process;
    standby_.erase(standby_.begin() + static_cast<std::ptrdiff_t>(i));
    return p;
  }
  return std::nullopt;
}

void StandbyWorkers::discard() {
  for (StandbyProcess& s : standby_) {
    if (s.process.pid > 0) {
      ::kill(-s.process.pid, SIGKILL);  // its process group: the worker and whatever it started
      ::waitpid(s.process.pid, nullptr, 0);
    }
    ::close(s.process.stdout_fd);
    ::close(s.process.stderr_fd);
  }
  standby_.clear();
}

}  // namespace cohort::launcher
