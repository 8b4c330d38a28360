// launcher/failure_summary.h — how a worker ended, in words, and the report printed when a job fails.
#pragma once

#include <sys/types.h>

#include <deque>
#include <string>

#include "runtime/worker_identity.h"

namespace cohort::launcher {

/// "exited with code 3", "was killed by signal 9 (SIGKILL: Killed)" from a waitpid() status.
std::string describe_exit(int wait_status);

/// True when the status is a clean exit with code 0.
bool exited_ok(int wait_status);

/// A worker that ended badly, as its agent saw it (worker_group.cpp). The form it has on this node;
/// round.h's RoundFailure is the same failure stamped with its round and time, the form that
/// travels between agents.
struct WorkerFailure {
  detail::WorkerIdentity who;  // rank, node, local rank, pid, round
  int wait_status = 0;
  std::deque<std::string> last_lines;
  std::string hang;            // a hang (hang_detector.h) instead of an exit: "made no progress for 3.2 s ..."
  std::string flight_records;  // a hang: where the ranks' flight records go ("DIR/flight-round0-rank<R>.json")
};

/// How the worker ended: its hang, else describe_exit() of its status.
std::string describe_end(const WorkerFailure& failure);

/// The multi-line failure summary:
///   cohort run: job failed: rank 1 (node 0, local rank 1, pid 4242) exited with code 3
///     flight records of node 0's ranks: DIR/flight-round0-rank<R>.json       (a hang only)
///     last 2 lines of rank 1's output:
///       [1] loading data
///       [1] error: no such file
std::string failure_summary(const WorkerFailure& failure);

}  // namespace cohort::launcher
