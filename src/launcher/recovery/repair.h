// launcher/recovery/repair.h — `cohort run --keep-survivors`: a failed worker is replaced alone while the
// others keep running (cohort/keep_running.h on the worker's side).
//
// When a worker dies or hangs, the round need not end: its agent kills it (a hung one), starts a
// replacement for its rank — a warm spare when one waits for that place — with
// COHORT_GENERATION=G, and every survivor, on every node, gets {"type":"rejoin","generation":G} on
// its worker link. The survivors' collectives with the lost rank fail; keep_running() re-forms the
// process groups as generation G with the replacement, and all restore the newest in-memory
// snapshot. The replacement counts against --max-restarts like a restart.
// A repair is only tried when it can work; otherwise the round ends as before (every worker
// stopped, the job restarted from its newest snapshot or checkpoint):
//   * every other worker of the job is running and its heartbeats say it trains in
//     keep_running() (another node's agent tells node 0 whether all of its workers do);
//   * a failed replacement had reached keep_running() (one that fails before, as a program that
//     cannot start would, is not replaced again and again: the round restarts);
//   * restarts are left;
//   * the workers' store outlives any of them: one machine's store file in the agent's run
//     directory, or on several machines the TCPStore that node 0's agent hosts (store_host.h)
//     instead of rank 0's worker.
// The agent whose worker failed checks its own workers (repairable()), node 0 checks the others
// and numbers the generation (Coordinator::request_repair); then the first agent replaces the
// worker (replace_worker()) and every agent tells its survivors (tell_rejoin()).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/config/options.h"
#include "launcher/round.h"

namespace cohort::launcher {

class WorkerGroup;
class SignalPipe;
class StandbyWorkers;
struct Watch;

struct Repair {
  std::string spare = "new";  // what took the place: "forked" (a spare forked by the one before it),
                             // "warm" (a spare the agent started) or "new" (a process started now)
  std::string notice;  // "cohort run: rank 1 ... replaced ...\n"
};

/// The index in `group` of the failed worker of `outcome` when this node's part of the rules
/// above allows replacing it alone; `restarts`: the job's restarts and repairs so far.
std::optional<size_t> repairable(const RunOptions& o, const Outcome& outcome, WorkerGroup& group, const Watch& watch,
                                 int restarts);

/// Replaces worker `lost` of `group` (stopping it first when it hangs) under `grant`'s generation
/// and tells the other workers of this node to rejoin. std::nullopt: no process could be
/// started — the round must end.
std::optional<Repair> replace_worker(const RunOptions& o, const Outcome& outcome, size_t lost, const RepairGrant& grant,
                                     WorkerGroup& group, const Watch& watch, StandbyWorkers& spares,
                                     const std::vector<std::string>& worker_env, SignalPipe& signals);

/// Tells every running worker of `group` to rejoin as `generation` (another node replaced one).
void tell_rejoin(WorkerGroup& group, const Watch& watch, int generation);

}  // namespace cohort::launcher
