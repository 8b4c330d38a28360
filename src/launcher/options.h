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
  double hang_timeout_s = 0;     // a worker silent or without progress this long is hung (0: off)
  bool verbose = false;          // say on stderr where workers started (errors and summaries always print)
  std::vector<std::string> command;  // PROGRAM ARGS...; command[0] resolved to a path by finalize
  // Elastic membership (elastic_options.h): an --rdzv-endpoint makes the job elastic.
  int min_nodes = 0;              // --nnodes MIN:MAX; 0 with --nnodes N (elastic: N:N)
  int max_nodes = 0;
  std::string rdzv_endpoint;      // HOST:PORT where the agents meet; empty: static (--master-addr)
  std::string rdzv_id;            // the job's name: agents started for another job are refused
  std::string rdzv_role = "auto"; // auto: host when this machine can listen at the endpoint
  double rdzv_settle_s = 5;       // once MIN nodes joined, wait this long for more (up to MAX)
  double node_timeout_s = 5;      // an agent silent this long is lost (heartbeats every fifth of it)
};

/// The port the agents coordinate on (node 0 listens there): the store's port + 1.
inline int agent_port(const RunOptions& o) { return o.master_port + 1; }

/// Fills defaults (nproc, threads, port, program path) and validates; throws cohort::ConfigError.
void finalize_options(RunOptions& options);

}  // namespace cohort::launcher
