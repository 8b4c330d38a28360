// runtime/worker_identity.h — who a worker is in the job: its rank, the world size, its place on
// its node, the round it runs in and its pid. One struct for every part that names a worker: the
// worker's monitor (the header of each metrics datagram), and the launcher's failure records
// (launcher/failure_summary.h, launcher/round.h).
//
// init() records the process's identity here once (record_process_identity); the monitor reads it
// back when it has not been given one of its own (ranks as threads set theirs). So the runtime
// never calls up into the monitor: the layers above read what the runtime knows. Torch-free.
#pragma once

#include <cstdint>
#include <optional>

namespace cohort::detail {

struct WorkerIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int node_rank = 0;
  int restart_count = 0;  // the round: COHORT_RESTART_COUNT
  int generation = 0;     // process groups re-formed within the round (COHORT_GENERATION, Context::rejoin)
  int64_t pid = 0;
};

/// Records this process's identity (cohort::init(), once it knows the job's environment).
void record_process_identity(const WorkerIdentity& who);

/// What init() recorded; nothing before init() (or in a process that never calls it).
std::optional<WorkerIdentity> process_identity();

}  // namespace cohort::detail
