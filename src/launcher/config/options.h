// launcher/config/options.h — what `cohort run` was asked to do, with defaults filled in and checked.
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
  bool warm_spares = false;      // start the next round's workers ahead of time (standby.h)
  bool keep_survivors = false;   // replace a failed worker alone; the others rejoin (repair.h, keep_running.h)
  bool fork_spares = true;       // with both: a released spare forks the next one (standby.h); --no-fork-spares
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
  // Monitoring (docs/monitoring.md): the leading agent logs events and serves the dashboard.
  std::string run_dir;            // events.jsonl, dashboard.url; empty: --log-dir, else cohort-runs/<time>-<pid>
  int dashboard_port = 0;         // 0: a free port the kernel picks
  bool no_dashboard = false;      // --no-dashboard: log only
  std::string dashboard_host = "127.0.0.1";
  std::string dashboard_token;    // --dashboard-token, else $COHORT_DASHBOARD_TOKEN; required off loopback
  std::string on_nan;             // stop, skip or warn: COHORT_ON_NAN for the workers; empty: theirs (stop)
  double stall_timeout_s = 60;    // no step anywhere this long: a "stall" anomaly (0: off)
  double straggler_factor = 1.5;  // busy time above this x the other ranks' median: a straggler
  // The job's secret (job_token.h): --job-token-file, else $COHORT_JOB_TOKEN; empty until the
  // rendezvous makes one (one node, or the host of several) or refuses to go on without it.
  std::string job_token_file;
  std::string job_token;
};

/// The port the agents coordinate on (node 0 listens there): the store's port + 1.
inline int agent_port(const RunOptions& o) { return o.master_port + 1; }

/// Upper bounds of --nproc-per-node and --threads-per-proc: far above any machine's cores, low
/// enough that a typo (100000) is an error instead of a fork bomb.
constexpr int kMaxProcsPerNode = 1024;
constexpr int kMaxThreadsPerProc = 1024;

/// Fills defaults (nproc, threads, port, program path, dashboard token) and validates; throws
/// cohort::ConfigError. The run directory's default is made later, by the agent that leads.
void finalize_options(RunOptions& options);

/// Throws ConfigError naming `flag` unless `s` is a finite number of seconds from `min_s` to `max_s`
/// (or 0 where `zero_allowed`: 0 turns a feature off) — "inf" or "nan" would overflow every
/// deadline computed from it, and 1e-9 would make a timeout fire at once (a healthy job killed).
void require_seconds(double s, const std::string& flag, bool zero_allowed, double min_s,
                     double max_s = 7 * 24 * 3600.0);

/// True for a loopback address ("127.0.0.1", any 127.x, "localhost", "::1").
bool is_loopback_host(const std::string& host);

}  // namespace cohort::launcher
