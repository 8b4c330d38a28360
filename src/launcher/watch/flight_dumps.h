// launcher/watch/flight_dumps.h — collecting the workers' flight records before a hung round is stopped.
//
// When a round ends in a hang (this node's, or another node's passed on by node 0), every worker
// of this node that has a link is asked, over the link, to write its flight record (its last
// collectives, src/runtime/agent_link/flight_recorder.h) to DIR/flight-round<N>-rank<R>.json, DIR being
// --log-dir or else the run directory. A process stopped by SIGSTOP cannot answer while stopped,
// and continuing it at once would let it finish the very collective its peers wait in (spoiling
// their records and its own), so the order is:
//   1. ask every worker (a stopped one finds the request queued when it continues);
//   2. wait, at most 3 s, for the records of the workers that are not stopped;
//   3. stop those workers (SIGTERM, then SIGKILL after --stop-timeout) — with a peer gone, the
//      stopped ones cannot complete a collective any more;
//   4. continue the stopped workers (SIGCONT) and wait, at most 3 s, for their records.
// The agent then stops what is left as usual. A line on stderr lists the records written.
// A hang that `--keep-survivors` repairs in place (recovery/repair.h) stops no survivor: only the
// workers that are not stopped — the survivors, and a hung worker still running (deadlocked) —
// are asked, step 2 alone, to DIR/flight-round<N>-gen<G>-rank<R>.json (G: the generation the
// repair begins), before the hung worker is replaced.
#pragma once

#include <string>

#include "launcher/round.h"

namespace cohort::launcher {

class WorkerGroup;
class SignalPipe;
struct Watch;

/// DIR/flight-round<N>-rank<R>.json; with a generation above 0, DIR/flight-round<N>-gen<G>-rank<R>.json.
std::string flight_record_path(const std::string& dir, int round, int rank, int generation = 0);
/// "DIR/flight-round<N>-rank<R>.json" with "<R>" as is, for summaries.
std::string flight_record_pattern(const std::string& dir, int round);

/// Collects the flight records when `outcome` is a hang (else does nothing). Returns the first
/// SIGINT/SIGTERM/SIGHUP seen meanwhile (0: none): an interrupt still prevents the restart.
int dump_flight_records(const Outcome& outcome, WorkerGroup& workers, const Watch& watch, int round,
                        double stop_grace_s, SignalPipe& signals);

/// The same for a hang repaired in place, before generation `generation` begins (above).
int dump_flight_records_in_place(const Outcome& outcome, WorkerGroup& workers, const Watch& watch, int round,
                                 int generation, SignalPipe& signals);

}  // namespace cohort::launcher
