// The elastic options, parsed and checked. See elastic_options.h.
#include "launcher/config/elastic_options.h"

#include <cstdlib>

#include "cohort/error.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(-1, message);
}

// A whole decimal number ("12"), or nullopt-like -1.
int parse_count(const std::string& text) {
  if (text.empty() || text.size() > 6) return -1;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
  }
  return std::atoi(text.c_str());
}

}  // namespace

bool parse_nnodes(const std::string& text, RunOptions& o) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const int n = parse_count(text);
    if (n < 0) return false;
    o.nnodes = n;
    o.min_nodes = o.max_nodes = 0;
    return true;
  }
  const int lo = parse_count(text.substr(0, colon)), hi = parse_count(text.substr(colon + 1));
  if (lo < 0 || hi < 0) return false;
  o.min_nodes = lo;
  o.max_nodes = hi;
  o.nnodes = hi;
  return true;
}

Endpoint parse_endpoint(const std::string& text) {
  Endpoint e;
  const size_t colon = text.rfind(':');
  e.host = colon == std::string::npos ? text : text.substr(0, colon);
  e.port = colon == std::string::npos ? 29400 : parse_count(text.substr(colon + 1));
  require(!e.host.empty() && e.port >= 1 && e.port <= 65535,
          "--rdzv-endpoint '" + text + "' is not HOST:PORT (e.g. 10.0.0.1:29400)");
  e.host = resolve_ipv4(e.host);
  return e;
}

void finalize_elastic_options(RunOptions& o) {
  const std::string range = std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes);
  if (!is_elastic(o)) {
    require(o.min_nodes == 0 && o.max_nodes == 0,
            "--nnodes " + range + " needs --rdzv-endpoint HOST:PORT and --rdzv-id NAME (an elastic job)");
    return;
  }
  if (o.min_nodes == 0 && o.max_nodes == 0) o.min_nodes = o.max_nodes = o.nnodes;  // --nnodes N: N:N
  require(o.min_nodes >= 1 && o.min_nodes <= o.max_nodes,
          "--nnodes " + std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes) +
              " must be MIN:MAX with 1 <= MIN <= MAX");
  require(!o.rdzv_id.empty(), "--rdzv-endpoint needs --rdzv-id NAME, the same on every node of the job");
  require(o.rdzv_role == "auto" || o.rdzv_role == "host" || o.rdzv_role == "member",
          "--rdzv-role '" + o.rdzv_role + "' must be auto, host or member");
  require_seconds(o.rdzv_settle_s, "--rdzv-settle", /*zero_allowed=*/true, /*min_s=*/0, /*max_s=*/3600);
  require_seconds(o.node_timeout_s, "--node-timeout", /*zero_allowed=*/false, /*min_s=*/1, /*max_s=*/3600);
  const Endpoint endpoint = parse_endpoint(o.rdzv_endpoint);
  o.rdzv_endpoint = endpoint.host + ":" + std::to_string(endpoint.port);
  o.nnodes = o.max_nodes;  // the static checks that follow see a job of up to MAX nodes
  o.node_rank = 0;         // assigned by the rendezvous in every round
}

}  // namespace cohort::launcher
