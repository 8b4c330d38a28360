// launcher/workers/worker_env.h — the environment a worker starts with: the launcher's own environment plus
// the variables cohort::init() reads (cohort's and torchrun's, see cohort/job_env.h), so the same
// program runs under cohort run, torchrun, mpirun or srun, and torchrun-style programs run here.
#pragma once

#include <string>
#include <vector>

#include "cohort/job_env.h"

namespace cohort::launcher {

/// Where one worker sits in the job: exactly what cohort::init() reads back from the variables
/// (the round trip is tested), plus what only the launcher knows.
struct WorkerPlace {
  JobEnv job;
  int nnodes = 1;
  int threads = 1;
  int max_restarts = 0;  // --max-restarts (job.restart_count is this round's number)
};

/// The variables set for a worker, as NAME=VALUE, in a fixed order.
std::vector<std::string> worker_variables(const WorkerPlace& place);

/// `base` (NAME=VALUE entries, e.g. from environ) with `overrides` replacing same-named entries.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::string>& overrides);

/// A worker's whole environment: `base` with the place's variables, then `extra` (NAME=VALUE), set.
std::vector<std::string> worker_environment(const std::vector<std::string>& base, const WorkerPlace& place,
                                            const std::vector<std::string>& extra);

/// This process's environment as NAME=VALUE entries.
std::vector<std::string> current_environment();

}  // namespace cohort::launcher
