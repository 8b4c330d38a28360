// launcher/worker_env.h — the environment a worker starts with: the launcher's own environment plus
// the variables cohort::init() reads (cohort's and torchrun's, see cohort/job_env.h), so the same
// program runs under cohort run, torchrun, mpirun or srun, and torchrun-style programs run here.
#pragma once

#include <string>
#include <vector>

namespace cohort::launcher {

/// Where one worker sits in the job.
struct WorkerPlace {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int threads = 1;
};

/// The variables set for a worker, as NAME=VALUE, in a fixed order.
std::vector<std::string> worker_variables(const WorkerPlace& place);

/// `base` (NAME=VALUE entries, e.g. from environ) with `overrides` replacing same-named entries.
std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::string>& overrides);

/// This process's environment as NAME=VALUE entries.
std::vector<std::string> current_environment();

}  // namespace cohort::launcher
