// Defaults and validation of `cohort run`'s options. See options.h.
#include "launcher/config/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "cohort/error.h"
#include "launcher/config/elastic_options.h"
#include "launcher/config/host_info.h"
#include "launcher/io/job_token.h"
#include "launcher/config/program_path.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(-1, message);
}

void require_count(int n, const std::string& flag, int lo, int hi) {
  require(n >= lo && n <= hi, flag + " " + std::to_string(n) + " must be " + std::to_string(lo) + ".." + std::to_string(hi));
}

}  // namespace

void require_seconds(double s, const std::string& flag, bool zero_allowed, double min_s, double max_s) {
  std::ostringstream shown;  // as typed, more or less: -1, 0.5, inf, nan
  shown << s;
  const std::string what = flag + " " + shown.str();
  require(std::isfinite(s), what + " is not a finite number of seconds");
  if (zero_allowed) {
    require(s >= 0, flag + " must not be negative (" + shown.str() + "; 0 turns it off)");
  } else {
    require(s > 0, what + " must be a positive number of seconds");
  }
  std::ostringstream min, max;
  min << min_s;
  max << max_s;
  require(s == 0 || s >= min_s, what + ": at least " + min.str() + " s" + (zero_allowed ? " (0 turns it off)" : ""));
  require(s <= max_s, what + " is more than " + max.str() + " s");
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return host.rfind("127.", 0) == 0;
}

void finalize_options(RunOptions& o) {
  finalize_elastic_options(o);  // first: an elastic job's --nnodes MIN:MAX becomes MAX for the checks below
  require(o.nnodes >= 1, "--nnodes " + std::to_string(o.nnodes) + " must be at least 1");
  require(o.node_rank >= 0 && o.node_rank < o.nnodes,
          "--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
              std::to_string(o.nnodes) + " (expected 0.." + std::to_string(o.nnodes - 1) + ")");
  // -1 (the default) means "pick one"; cli.cpp refuses a -1 typed by the user.
  if (o.nproc_per_node != -1) require_count(o.nproc_per_node, "--nproc-per-node", 1, kMaxProcsPerNode);
  if (o.threads_per_proc != -1) require_count(o.threads_per_proc, "--threads-per-proc", 1, kMaxThreadsPerProc);
  require_seconds(o.rdzv_timeout_s, "--rdzv-timeout", false, 1);
  require_seconds(o.stop_grace_s, "--stop-timeout", true, 0);  // 0: SIGKILL at once
  require_count(o.max_restarts, "--max-restarts", 0, 1000000);
  require_count(o.tail_lines, "--tail-lines", 0, 100000);
  require(!o.warm_spares || o.max_restarts > 0,
          "--warm-spares prepares workers for a restart, and --max-restarts is 0 (no restarts)");
  require(!o.keep_survivors || o.max_restarts > 0,
          "--keep-survivors replaces failed workers, and --max-restarts is 0 (no replacements)");
  require_seconds(o.hang_timeout_s, "--hang-timeout", true, 1);  // 0: hang detection off
  require(!o.master_addr.empty(), "--master-addr must not be empty");
  require(o.master_port == -1 || (o.master_port >= 1 && o.master_port <= 65535),
          "--master-port " + std::to_string(o.master_port) + " is not a TCP port (1..65535)");
  require(o.nnodes == 1 || o.master_port < 65535,
          "--master-port 65535 leaves no port for the agents (they use --master-port + 1)");
  require(o.on_nan.empty() || o.on_nan == "stop" || o.on_nan == "skip" || o.on_nan == "warn",
          "--on-nan '" + o.on_nan + "' must be stop, skip or warn");
  require(o.dashboard_port >= 0 && o.dashboard_port <= 65535,
          "--dashboard-port " + std::to_string(o.dashboard_port) + " is not a TCP port (0..65535; 0: any free one)");
  require_seconds(o.stall_timeout_s, "--stall-timeout", true, 1);  // 0: stall detection off
  require(std::isfinite(o.straggler_factor) && o.straggler_factor > 1 && o.straggler_factor <= 1000,
          "--straggler-factor must be a number above 1 and up to 1000");
  require(!o.dashboard_host.empty(), "--dashboard-host must not be empty");
  if (o.dashboard_token.empty()) {
    if (const char* t = std::getenv("COHORT_DASHBOARD_TOKEN"); t && *t) o.dashboard_token = t;
  }
  require(o.no_dashboard || !o.dashboard_token.empty() || is_loopback_host(o.dashboard_host),
          "--dashboard-host " + o.dashboard_host +
              " is not a loopback address: the dashboard would be reachable from other machines, so it needs a "
              "token (--dashboard-token T or COHORT_DASHBOARD_TOKEN) that every request must carry");
  require(!o.command.empty(), "no program given: usage is cohort run [options] [--] PROGRAM [ARGS...]");

  load_job_token(o);
  o.master_addr = resolve_ipv4(o.master_addr);
  o.command[0] = resolve_program(o.command[0]);

  if (o.nproc_per_node == -1) {
    int gpus = visible_gpu_count();
    o.nproc_per_node = gpus > 0 ? gpus : usable_cpu_count();
  }
  if (o.threads_per_proc == -1) o.threads_per_proc = std::max(1, usable_cpu_count() / o.nproc_per_node);
  if (o.master_port == -1 && !is_elastic(o)) {  // elastic: the rendezvous host picks the store's port
    // On one machine any free port will do; several machines must agree, so use torchrun's default.
    o.master_port = o.nnodes == 1 ? pick_free_port(o.master_addr) : 29500;
  }
}

}  // namespace cohort::launcher
