// launcher/recovery/repair.h — `cohort run --keep-survivors`: a failed worker is replaced alone while the
// others keep running (cohort/keep_running.h on the worker's side).
//
// When a worker of a one-machine job dies or hangs, the round need not end: the agent kills it (a
// hung one), starts a replacement for its rank — a warm spare when one waits for that place —
// with COHORT_GENERATION=G, and sends every survivor {"type":"rejoin","generation":G} on the
// worker link. The survivors' collectives with the lost rank fail; keep_running() re-forms the
// process groups as generation G with the replacement, and all restore the newest in-memory
// snapshot. The replacement counts against --max-restarts like a restart.
// A repair is only tried when it can work; otherwise the round ends as before (every worker
// stopped, the job restarted from its newest snapshot or checkpoint):
//   * every other worker is running and its heartbeats say it trains in keep_running();
//   * a failed replacement had reached keep_running() (one that fails before, as a program that
//     cannot start would, is not replaced again and again: the round restarts);
//   * restarts are left; the job runs on one machine (its workers meet in the agent's store
//     file, which outlives any worker; a TCPStore lives in rank 0's process).
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
  int rank = -1;
  int generation = 0;
  bool warm = false;   // a warm spare took the place
  std::string notice;  // "cohort run: rank 1 ... replaced ...\n"
};

/// Replaces the failed worker of `outcome` in place when the rules above allow it; `generation`
/// counts this round's repairs (the new one's number is returned in Repair). `restarts` is the
/// job's restarts and repairs so far. std::nullopt: the round must end.
std::optional<Repair> repair_in_place(const RunOptions& o, const Outcome& outcome, WorkerGroup& group,
                                      const Watch& watch, StandbyWorkers& spares, int& generation, int restarts,
                                      const std::vector<std::string>& worker_env, SignalPipe& signals);

}  // namespace cohort::launcher
