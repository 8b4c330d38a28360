// launcher/failure_history.h — what `cohort run` says about restarts: the line printed when a round
// failed and the job starts again, the note when a job succeeded after restarts, and the history
// of every round's failure printed when the job finally fails.
#pragma once

#include <string>
#include <vector>

#include "launcher/round.h"

namespace cohort::launcher {

/// "rank 1 (node 0, local rank 1, pid 4242) exited with code 3"
std::string describe_failure(const RoundFailure& failure);

/// "cohort run: round 0 failed: rank 1 (...) exited with code 3; restarting the job (restart 1 of 3)";
/// `restart`: the job's restarts with this one (repairs under --keep-survivors count too)
std::string restart_notice(const RoundFailure& failure, int restart, int max_restarts);

/// "cohort run: job succeeded after 2 restarts"
std::string success_note(int restarts);

/// One line per failed round, oldest first (`restarts`: how many rounds were started after the first):
///   cohort run: failure history (2 restarts, --max-restarts 2):
///     round 0 at 2025-01-07 14:03:12.345: rank 1 (node 0, local rank 1, pid 4242) exited with code 3
///     ...
std::string failure_history(const std::vector<RoundFailure>& history, int restarts, int max_restarts);

/// Local wall time "2025-01-07 14:03:12.345" of a time in ms since the epoch.
std::string format_wall_time(int64_t ms);

}  // namespace cohort::launcher
