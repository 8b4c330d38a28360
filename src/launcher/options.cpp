// Defaults and validation of `cohort run`'s options. See options.h.
#include "options.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cohort/error.h"
#include "elastic_options.h"
#include "host_info.h"
#include "program_path.h"
#include "socket_util.h"

namespace cohort::launcher {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(-1, message);
}

}  // namespace

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
  require(o.nproc_per_node == -1 || o.nproc_per_node >= 1,
          "--nproc-per-node " + std::to_string(o.nproc_per_node) + " must be at least 1");
  require(o.threads_per_proc == -1 || o.threads_per_proc >= 1,
          "--threads-per-proc " + std::to_string(o.threads_per_proc) + " must be at least 1");
  require(o.rdzv_timeout_s > 0, "--rdzv-timeout must be a positive number of seconds");
  require(o.stop_grace_s >= 0, "--stop-timeout must not be negative");
  require(o.max_restarts >= 0, "--max-restarts " + std::to_string(o.max_restarts) + " must be 0 or more");
  require(!o.warm_spares || o.max_restarts > 0,
          "--warm-spares prepares workers for a restart, and --max-restarts is 0 (no restarts)");
  require(o.hang_timeout_s >= 0, "--hang-timeout must not be negative (0 turns hang detection off)");
  require(!o.master_addr.empty(), "--master-addr must not be empty");
  require(o.master_port == -1 || (o.master_port >= 1 && o.master_port <= 65535),
          "--master-port " + std::to_string(o.master_port) + " is not a TCP port (1..65535)");
  require(o.nnodes == 1 || o.master_port < 65535,
          "--master-port 65535 leaves no port for the agents (they use --master-port + 1)");
  require(o.on_nan.empty() || o.on_nan == "stop" || o.on_nan == "skip" || o.on_nan == "warn",
          "--on-nan '" + o.on_nan + "' must be stop, skip or warn");
  require(o.dashboard_port >= 0 && o.dashboard_port <= 65535,
          "--dashboard-port " + std::to_string(o.dashboard_port) + " is not a TCP port (0..65535; 0: any free one)");
  require(o.stall_timeout_s >= 0, "--stall-timeout must not be negative (0 turns stall detection off)");
  require(o.straggler_factor > 1, "--straggler-factor must be greater than 1");
  require(!o.dashboard_host.empty(), "--dashboard-host must not be empty");
  if (o.dashboard_token.empty()) {
    if (const char* t = std::getenv("COHORT_DASHBOARD_TOKEN"); t && *t) o.dashboard_token = t;
  }
  require(o.no_dashboard || !o.dashboard_token.empty() || is_loopback_host(o.dashboard_host),
          "--dashboard-host " + o.dashboard_host +
              " is not a loopback address: the dashboard would be reachable from other machines, so it needs a "
              "token (--dashboard-token T or COHORT_DASHBOARD_TOKEN) that every request must carry");
  require(!o.command.empty(), "no program given: usage is cohort run [options] [--] PROGRAM [ARGS...]");

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
