// `cohort run`'s options. See cli.h; meanings and defaults are in options.h and docs/launcher.md.
#include "launcher/config/cli.h"

#include <stdexcept>
#include <string>

#include "launcher/config/elastic_options.h"

namespace cohort::launcher {

CLI::App* add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* run = app.add_subcommand(
      "run", "Start PROGRAM as the workers of a distributed job and supervise them.\nUsage: cohort run [OPTIONS] [--] PROGRAM [ARGS...]");
  run->add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                  "Workers on this node (default: one per GPU where CUDA is present, else one per CPU core)")
      ->check(CLI::Range(1, kMaxProcsPerNode));  // also refuses -1, the default's internal value
  run->add_option_function<std::string>(
         "--nnodes",
         [&o](const std::string& v) {
           if (!parse_nnodes(v, o)) throw CLI::ValidationError("--nnodes", "'" + v + "' is not N or MIN:MAX");
         },
         "Number of nodes (machines) in the job: N, or MIN:MAX for an elastic job (with --rdzv-endpoint)")
      ->default_str("1");
  run->add_option("--node-rank,--node_rank", o.node_rank, "This node's rank, 0..nnodes-1")->capture_default_str();
  run->add_option("--master-addr,--master_addr", o.master_addr,
                  "Address of node 0: the workers' store and the agents' rendezvous listen there")
      ->capture_default_str();
  run->add_option("--master-port,--master_port", o.master_port,
                  "Port of the workers' store; the agents use the next port (default: a free port on one "
                  "machine, 29500 on several)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            // -1 is the default's internal value ("pick one"): typed, it must not silently mean that.
            int port = -1;
            try {
              size_t used = 0;
              port = std::stoi(v, &used);
              if (used != v.size()) port = -1;
            } catch (const std::exception&) {
            }
            return port >= 1 && port <= 65535 ? "" : "'" + v + "' is not a TCP port (1..65535)";
          },
          "PORT"));
  run->add_option("--log-dir,--log_dir", o.log_dir, "Also write each rank's output to DIR/rank<R>.log");
  run->add_option("--threads-per-proc", o.threads_per_proc,
                  "Intra-op threads per worker: COHORT_THREADS and OMP_NUM_THREADS (default: cores / workers)")
      ->check(CLI::Range(1, kMaxThreadsPerProc));
  run->add_option("--rdzv-timeout", o.rdzv_timeout_s, "Seconds the nodes wait for each other at start")
      ->capture_default_str();
  run->add_option("--stop-timeout", o.stop_grace_s, "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  run->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "Times the whole job is started again after a worker fails (0: fail on the first failure)")
      ->capture_default_str();
  run->add_flag("--warm-spares", o.warm_spares,
                "Keep the next round's workers started and waiting in cohort::init(), so that a restart does "
                "not wait for new processes to load (needs --max-restarts; docs/launcher.md)");
  run->add_flag("--keep-survivors", o.keep_survivors,
                "Replace a failed or hung worker alone while the others keep running (programs that train in "
                "cohort::keep_running(); every node with it and the same --max-restarts, which it needs; "
                "docs/launcher.md)");
  run->add_flag("!--no-fork-spares", o.fork_spares,
                "With --keep-survivors --warm-spares: start each next spare as a new process instead of forking it "
                "from the spare released before it (for programs that open connections before cohort::init(); "
                "docs/launcher.md)");
  run->add_option("--tail-lines", o.tail_lines, "Lines of a failed worker's output quoted in the summary")
      ->capture_default_str();
  run->add_option("--hang-timeout,--hang_timeout", o.hang_timeout_s,
                  "Seconds after which a worker that sends no heartbeat, or whose training makes no progress, "
                  "counts as failed (0: off)")
      ->capture_default_str();
  run->add_flag("-v,--verbose", o.verbose, "Say where the workers started");
  // Elastic membership (docs/launcher.md, "Elastic membership").
  run->add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                  "HOST:PORT where the agents of an elastic job meet; the agent that can listen there hosts");
  run->add_option("--rdzv-id,--rdzv_id", o.rdzv_id, "Name of the elastic job; agents of another job are refused");
  run->add_option("--rdzv-role", o.rdzv_role, "auto, host or member: who hosts the rendezvous (auto: whoever can listen at the endpoint)")
      ->capture_default_str();
  run->add_option("--rdzv-settle", o.rdzv_settle_s, "Seconds to wait for more nodes once MIN joined (up to MAX)")
      ->capture_default_str();
  run->add_option("--node-timeout", o.node_timeout_s, "Seconds of silence after which an elastic job's agent counts as lost")
      ->capture_default_str();
  // Monitoring (docs/monitoring.md).
  run->add_option("--run-dir", o.run_dir,
                  "Where the event log (events.jsonl) and dashboard.url go (default: --log-dir, else "
                  "cohort-runs/<YYYYmmdd-HHMMSS>-<pid> in the current directory)");
  run->add_option("--dashboard-port", o.dashboard_port, "Port of the live dashboard and /metrics (0: a free one)")
      ->capture_default_str();
  run->add_flag("--no-dashboard", o.no_dashboard, "Serve no dashboard (the event log is still written)");
  run->add_option("--dashboard-host", o.dashboard_host,
                  "Address the dashboard binds to; anything but loopback needs --dashboard-token")
      ->capture_default_str();
  run->add_option("--dashboard-token", o.dashboard_token,
                  "Token every dashboard request must carry (default: $COHORT_DASHBOARD_TOKEN)");
  run->add_option("--job-token-file", o.job_token_file,
                  "File with the job's secret, the same on every node (default: $COHORT_JOB_TOKEN; node 0 makes one "
                  "when absent and says where); only the owner may read it");
  run->add_option("--on-nan", o.on_nan, "What workers do on a NaN/Inf loss or gradient: stop, skip or warn (default: stop)")
      ->check(CLI::IsMember({"stop", "skip", "warn"}));
  run->add_option("--stall-timeout", o.stall_timeout_s, "Seconds without a step on any rank before a stall is reported (0: off)")
      ->capture_default_str();
  run->add_option("--straggler-factor", o.straggler_factor,
                  "A rank busy this many times longer than the others' median is a straggler")
      ->capture_default_str();
  return run;
}

std::vector<std::string> split_at_program(const std::vector<std::string>& args, const CLI::App& run,
                                          std::vector<std::string>& command) {
  std::vector<std::string> before;
  size_t i = 0;
  // Up to and including the subcommand name: the first word that is not an option. Another
  // subcommand (`cohort sim run ...`) keeps all its arguments.
  for (; i < args.size(); ++i) {
    before.push_back(args[i]);
    if (args[i].empty() || args[i][0] != '-') {
      if (args[i] != run.get_name()) return args;
      ++i;
      break;
    }
  }
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      return before;
    }
    if (a.size() > 1 && a[0] == '-') {
      before.push_back(a);
      if (a.find('=') != std::string::npos) continue;
      const CLI::Option* opt = run.get_option_no_throw(a);
      if (opt != nullptr && opt->get_expected_max() > 0 && i + 1 < args.size()) before.push_back(args[++i]);
      continue;  // unknown options stay for CLI11 to report
    }
    command.assign(args.begin() + static_cast<long>(i), args.end());
    return before;
  }
  return before;
}

}  // namespace cohort::launcher
