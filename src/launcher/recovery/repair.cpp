// Replacing one worker while the others keep running. See repair.h.
#include "launcher/recovery/repair.h"

#include <nlohmann/json.hpp>

#include "launcher/watch/watch.h"
#include "launcher/workers/spawn.h"
#include "launcher/workers/standby.h"
#include "launcher/workers/worker_group.h"
#include "launcher/workers/worker_link.h"

namespace cohort::launcher {
namespace {

void send_rejoin(WorkerGroup& group, const Watch& watch, int generation, size_t except) {
  const std::string rejoin = nlohmann::json{{"type", "rejoin"}, {"generation", generation}}.dump();
  auto& workers = group.workers();
  for (size_t i = 0; i < workers.size(); ++i)
    if (i != except && !workers[i].exited) watch.link->request(workers[i].pid, rejoin);
}

}  // namespace

std::optional<size_t> repairable(const RunOptions& o, const Outcome& outcome, WorkerGroup& group, const Watch& watch,
                                 int restarts) {
  if (!o.keep_survivors || outcome.kind != Outcome::worker_failed || !outcome.failure || !watch.link) return std::nullopt;
  if (restarts >= o.max_restarts) return std::nullopt;
  auto& workers = group.workers();
  size_t lost = workers.size();
  for (size_t i = 0; i < workers.size(); ++i)
    if (workers[i].pid == static_cast<pid_t>(outcome.failure->who.pid)) lost = i;
  if (lost == workers.size()) return std::nullopt;
  const JobEnv& job = workers[lost].place.job;
  if (job.store_file.empty() && !job.store_hosted) return std::nullopt;  // the store died with rank 0
  if (workers[lost].replacement && !workers[lost].rejoinable) return std::nullopt;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (i == lost) continue;
    if (workers[i].exited || !workers[i].rejoinable || !watch.link->knows(workers[i].pid)) return std::nullopt;
  }
  return lost;
}

std::optional<Repair> replace_worker(const RunOptions& o, const Outcome& outcome, size_t lost, const RepairGrant& grant,
                                     WorkerGroup& group, const Watch& watch, StandbyWorkers& spares,
                                     const std::vector<std::string>& worker_env, SignalPipe& signals) {
  auto& workers = group.workers();
  // A hung worker first: its connections close with it, which is how the survivors learn of it.
  if (!workers[lost].exited) group.stop({lost}, 0, signals);
  Repair r;
  std::vector<std::string> env = worker_env;
  env.push_back("COHORT_GENERATION=" + std::to_string(grant.generation));
  try {
    // With forking on (--warm-spares, standby.h) the replacement's "go" asks it to fork the next
    // spare for its place first; so a new process starts as a standby too, released at once.
    const bool fork = spares.forking();
    if (auto spare = spares.take_for(workers[lost].place, *watch.link)) {
      group.replace(lost, spare->process, /*standby=*/true, fork);
      r.spare = spare->forked ? "forked" : "warm";
    } else if (fork) {
      group.replace(lost, StandbyWorkers::start_one(workers[lost].place, o.command, worker_env), /*standby=*/true, fork);
    } else {
      group.replace(lost, spawn_worker(o.command, worker_environment(current_environment(), workers[lost].place, env)),
                    /*standby=*/false);
    }
  } catch (const std::exception&) {
    return std::nullopt;  // no process: the round ends, and its restart says why
  }
  group.release_standby(*watch.link, grant.generation);  // spares now, a new standby once it stood by
  send_rejoin(group, watch, grant.generation, lost);
  r.notice = "cohort run: rank " + std::to_string(grant.rank) + " " + outcome.failure->how + "; " +
             (r.spare == "forked" ? "a warm spare (forked by the one before it) replaces it"
                                  : r.spare == "warm" ? "a warm spare replaces it"
                                                  : "replacing it") + " while the other ranks keep running (generation " +
             std::to_string(grant.generation) + ", restart " + std::to_string(grant.restarts) + " of " +
             std::to_string(o.max_restarts) + ")\n";
  return r;
}

void tell_rejoin(WorkerGroup& group, const Watch& watch, int generation) {
  if (watch.link) send_rejoin(group, watch, generation, group.workers().size());
}

}  // namespace cohort::launcher
