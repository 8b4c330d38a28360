// cohort/job_env.h — where this process sits in a job, read from the environment.
//
// Pure configuration: no torch, no network. cohort::init() uses it, and so does the launcher when
// it writes the same variables for its workers. Sources, first match wins:
//   1. cohort's own      COHORT_RANK, COHORT_WORLD_SIZE, COHORT_LOCAL_RANK, COHORT_LOCAL_WORLD_SIZE,
//                        COHORT_MASTER_ADDR, COHORT_MASTER_PORT, COHORT_NODE_RANK
//   2. torchrun's        RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   3. OpenMPI's         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                        OMPI_COMM_WORLD_LOCAL_SIZE
//   4. Slurm's           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   5. none of them      a world of one.
// The store address comes from COHORT_MASTER_* or else MASTER_ADDR / MASTER_PORT whichever family
// gave the rank (mpirun and srun users export MASTER_ADDR themselves); default 127.0.0.1:29500.
// COHORT_STORE_FILE names a file for a c10d FileStore instead, for ranks that share one machine:
// `cohort run` sets it for a one-node job (in its private 0700 run directory), so that such a job
// opens no TCP port at all (docs/security.md). COHORT_JOB_KEY, a key cohort run derives from the
// job's token, authenticates each rank's part of a checkpoint commit in the store.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace cohort {

/// Where this process sits in a job, as resolve_job_env() reads it from the environment.
struct JobEnv {
  int rank = 0;                 ///< this process's rank, 0 to world_size - 1
  int world_size = 1;           ///< processes in the job
  int local_rank = 0;           ///< rank among the processes on this machine (no local variable: rank)
  int local_world_size = 1;     ///< processes on this machine (no local variable: world_size)
  int node_rank = 0;            ///< this machine's number (COHORT_NODE_RANK, else 0)
  std::string master_addr = "127.0.0.1";  ///< the store's host (rank 0 hosts the store)
  int master_port = 29500;      ///< the store's TCP port
  int restart_count = 0;        ///< COHORT_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT
  /// COHORT_GENERATION: how many times this round's process groups were re-formed around a
  /// replaced worker while the others kept running (`cohort run --keep-survivors`, keep_running.h).
  /// A process started with a generation above 0 joins a job that is already running.
  int generation = 0;
  std::string store_file;       ///< COHORT_STORE_FILE: the ranks meet in a FileStore there (empty: TCPStore)
  /// COHORT_STORE_HOSTED=1: the TCPStore at master_addr:master_port is hosted outside the workers
  /// (by node 0's `cohort run --keep-survivors`, tools/store_host_main.cpp), so that it outlives any
  /// of them; rank 0 connects to it like every other rank instead of hosting it.
  bool store_hosted = false;
  std::string job_key;          ///< COHORT_JOB_KEY (from cohort run): signs checkpoint commit parts (empty: unsigned)
  std::string source = "none";  ///< "cohort", "torchrun", "openmpi", "slurm" or "none"
};

/// Looks a variable up; returns nullopt when unset. Tests pass a map instead of the environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The process environment (getenv).
std::optional<std::string> process_env(const std::string& name);

/// Resolves the job environment. Throws cohort::ConfigError naming the variable when the
/// environment is half set ("RANK is set but WORLD_SIZE is not") or a value is invalid.
JobEnv resolve_job_env(const EnvLookup& lookup = process_env);

}  // namespace cohort
