// Replacing one worker while the others keep running. See repair.h.
#include "launcher/recovery/repair.h"

#include <nlohmann/json.hpp>

#include "launcher/watch/watch.h"
#include "launcher/workers/spawn.h"
#include "launcher/workers/standby.h"
#include "launcher/workers/worker_group.h"
#include "launcher/workers/worker_link.h"

namespace cohort::launcher {

std::optional<Repair> repair_in_place(const RunOptions& o, const Outcome& outcome, WorkerGroup& group,
                                      const Watch& watch, StandbyWorkers& spares, int& generation, int restarts,
                                      const std::vector<std::string>& worker_env, SignalPipe& signals) {
  if (!o.keep_survivors || outcome.kind != Outcome::worker_failed || !outcome.failure || !watch.link) return std::nullopt;
  if (restarts >= o.max_restarts) return std::nullopt;
  auto& workers = group.workers();
  const RoundFailure& f = *outcome.failure;
  size_t lost = workers.size();
  for (size_t i = 0; i < workers.size(); ++i)
    if (workers[i].pid == static_cast<pid_t>(f.who.pid)) lost = i;
  if (lost == workers.size() || workers[lost].place.job.store_file.empty()) return std::nullopt;
  if (workers[lost].replacement && !workers[lost].rejoinable) return std::nullopt;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (i == lost) continue;
    if (workers[i].exited || !workers[i].rejoinable || !watch.link->knows(workers[i].pid)) return std::nullopt;
  }
  // A hung worker first: its connections close with it, which is how the survivors learn of it.
  if (!workers[lost].exited) group.stop({lost}, 0, signals);

  Repair r;
  r.rank = workers[lost].place.job.rank;
  r.generation = ++generation;
  std::vector<std::string> env = worker_env;
  env.push_back("COHORT_GENERATION=" + std::to_string(r.generation));
  try {
    if (auto spare = spares.take_for(workers[lost].place, *watch.link)) {
      group.replace(lost, *spare, /*standby=*/true);
      r.warm = true;
    } else {
      group.replace(lost, spawn_worker(o.command, worker_environment(current_environment(), workers[lost].place, env)),
                    /*standby=*/false);
    }
  } catch (const std::exception&) {
    return std::nullopt;  // no process: the round ends, and its restart says why
  }
  if (r.warm) group.release_standby(*watch.link, r.generation);
  const std::string rejoin = nlohmann::json{{"type", "rejoin"}, {"generation", r.generation}}.dump();
  for (size_t i = 0; i < workers.size(); ++i)
    if (i != lost) watch.link->request(workers[i].pid, rejoin);
  r.notice = "cohort run: rank " + std::to_string(r.rank) + " " + f.how + "; " +
             (r.warm ? "a warm spare replaces it" : "replacing it") + " while the other ranks keep running (generation " +
             std::to_string(r.generation) + ", restart " + std::to_string(restarts + 1) + " of " +
             std::to_string(o.max_restarts) + ")\n";
  return r;
}

}  // namespace cohort::launcher
