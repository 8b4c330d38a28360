// launcher/options.h — what `cohort run` was asked to do, with defaults filled in and checked.
//
// Pure data plus validation: no processes, no sockets. The command line (cli.cpp) fills RunOptions;
// finalize_options() supplies the machine-dependent defaults and rejects bad input with a one-line
// cohort::ConfigError naming the option. Not here: spawning (spawn.h), rendezvous (rendezvous.h).
#pragma once

#include <string>
#include <vector>

namespace cohort::launcher {

struct RunOptions {
  int nproc_per_node = -1;       // -1: one per GPU where CUDA is present, else one per CPU core
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;          // -1: a free port on one machine, 29500 on several
  std::string log_dir;           // empty: no per-rank log files
  int threads_per_proc = -1;     // -1: cores / local workers (at least 1)
  double rdzv_timeout_s = 60;    // how long agents wait for each other before giving up
  double stop_grace_s = 5;       // SIGTERM → SIGKILL delay when stopping workers
  int max_restarts = 0;          // rounds started again after a worker failure (0: fail fast)
  int tail_lines = 20;           // lines of a failed worker's output quoted in the summary
  bool verbose = false;          // say on stderr where workers started (errors and summaries always print)
  std::vector<std::string> command;  // PROGRAM ARGS...; command[0] resolved to a path by finalize
};

/// The port the agents coordinate on (node 0 listens there): the store's port + 1.
inline int agent_port(const RunOptions& o) { return o.master_port + 1; }

/// Fills defaults (nproc, threads, port, program path) and validates; throws cohort::ConfigError.
void finalize_options(RunOptions& options);

}  // namespace cohort::launcher
