// launcher/round.h — one round of a job, what ended it, and whether the job restarts.
//
// A job runs in rounds 0, 1, 2, ...: rendezvous → start every node's workers → supervise →
// outcome → restart decision. A round that fails (a worker exits non-zero or dies by a signal,
// here or on another node) ends on every node, and the job starts again with the next round
// number (COHORT_RESTART_COUNT) while --max-restarts allows. Node 0's agent (or the only agent)
// decides; the others are told (static/coordinators.h), so all nodes agree on the count.
// Pure data and the restart rule: no processes, no sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "launcher/failure_summary.h"

namespace cohort::launcher {

/// This node's place in one round. With static membership only `round` and `restarts` change
/// between rounds; an elastic job (elastic/coordinators.h) may change everything but the store.
struct Assignment {
  int round = 0;        // COHORT_RESTART_COUNT: 0, then +1 whenever the workers start again
  int restarts = 0;     // restarts after a worker failure so far (what --max-restarts limits);
                        // membership changes are rounds but not restarts
  int world_size = 0;
  int rank_base = 0;    // global rank of this node's local rank 0
  int node_rank = 0;    // this node's place in the round's node order
  int nnodes = 1;       // nodes in the round
  std::string master_addr;  // the workers' store (global rank 0 hosts it)
  int master_port = 0;
};

/// The worker failure that ended a round, as the agent that saw it recorded it; travels between
/// agents so that every node prints the same history.
///
/// A failure has two forms on its way to the restart decision, and only two:
///   WorkerFailure (failure_summary.h)  what this node's agent saw: the worker, its wait status and
///                                      last lines. It holds a deque and a raw status, local facts.
///   RoundFailure (here)                the same worker (WorkerIdentity) stamped with the round and
///                                      the time, its exit in words: plain values that go into a
///                                      message to other agents (protocol.cpp), the failure
///                                      history and the event log.
/// The change happens once, in round_failure(), where the supervisor sees the worker end. Outcome,
/// PeerEvent (coordinator.h) and RoundEnd are not further forms: they are envelopes that carry
/// the RoundFailure unchanged, next to what only they know (how the round ended here, what the
/// job decided).
struct RoundFailure {
  detail::WorkerIdentity who;  // who.restart_count: the round the failure ended
  std::string how;      // describe_exit(): "exited with code 3", "was killed by signal 9 (...)"
  int64_t time_ms = 0;  // wall clock (ms since the epoch) when the agent reaped the worker
  std::string summary;  // failure_summary(): the report with the worker's last lines

  int round() const { return who.restart_count; }
};

/// Stamps a worker's failure with the round and the current time.
RoundFailure round_failure(const WorkerFailure& failure, int round);

/// `cohort run --keep-survivors` (recovery/repair.h): the job's word that the failed worker of
/// `rank` is replaced alone under `generation` while every other rank rejoins around it. Node 0
/// (or the lone agent) grants it and tells every node, so that all agree on the generation.
struct RepairGrant {
  int rank = -1;
  int node = 0;         // the node that replaces the worker
  int generation = 0;   // COHORT_GENERATION of the re-formed process groups, from 1 in each round
  int restarts = 0;     // the job's restarts and repairs, this one included (what --max-restarts limits)
};

/// How a round ended as this node saw it first (the supervisor's result).
struct Outcome {
  enum Kind {
    succeeded,      // every worker of every node exited 0
    worker_failed,  // one of this node's workers failed
    peer_failed,    // a worker failed on another node (or node 0 ended the round because of one)
    peer_stopped,   // another node stopped the job: it was interrupted or could not start its workers
    peer_lost,      // another node's agent is gone
    interrupted,    // this agent received SIGINT / SIGTERM / SIGHUP
    peer_repaired,  // not an end: another node replaces a failed worker and this node's workers
                    // rejoin around it (--keep-survivors); the round goes on
  } kind = succeeded;
  std::string summary;                  // what to print if the job ends here
  int signal = 0;                       // interrupted: the signal received
  std::optional<RoundFailure> failure;  // worker_failed, peer_failed, peer_repaired: the failure
  std::optional<RepairGrant> repair = std::nullopt;  // peer_repaired: what node 0 granted
};

/// The job's decision about a round that did not succeed.
struct RoundEnd {
  bool restart = false;                 // a next round follows (after a failure or a membership change)
  std::string summary;                  // printed when the job ends here
  std::optional<RoundFailure> failure;  // the worker failure that ended the round, if one did
  std::string notice;                   // printed when the job goes on (empty: the agent's restart notice)
};

/// The restart rule: a worker failure restarts the job while restarts are left (restarts <
/// max_restarts); an interrupt, a lost node or a node that stopped the job never restart it.
/// (Hang detection will add "a worker stopped making progress" as a worker failure.) Elastic jobs
/// add their membership rule on top (elastic/coordinators.h).
RoundEnd decide_round_end(const Outcome& outcome, int restarts, int max_restarts);

/// The job ends between rounds without a restart (a node lost or stopped it, the next round's
/// rendezvous timed out); what() is the summary to print, ending in a newline.
struct JobStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An elastic job ended successfully before this node got a place in it (it waited as a spare);
/// what() says so. `cohort run` exits 0.
struct JobFinished : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace cohort::launcher
