// Who hosts an elastic job's rendezvous: the agent that can listen at the endpoint (--rdzv-role auto),
// or the one told to (host / member). See elastic/coordinators.h.
#include <cerrno>
#include <cstring>

#include "cohort/error.h"
#include "launcher/elastic/coordinators.h"
#include "launcher/config/elastic_options.h"
#include "launcher/io/job_token.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {

RendezvousResult elastic_rendezvous(RunOptions& o, SignalPipe& signals) {
  const Endpoint endpoint = parse_endpoint(o.rdzv_endpoint);
  auto join = [&] {
    require_job_token(o, "this node of job '" + o.rdzv_id + "'");
    return join_elastic_job(o, signals);
  };
  if (o.rdzv_role == "member") return join();
  int err = 0;
  const int listener = try_listen_tcp(endpoint.host, endpoint.port, &err);
  if (listener >= 0) {
    ensure_shared_job_token(o);
    return host_elastic_job(o, listener, signals);
  }
  // Auto: an address of another machine, or one where another agent of this machine listens
  // already (several agents on one machine, as in tests), makes this agent a member.
  if (o.rdzv_role == "auto" && (err == EADDRNOTAVAIL || err == EADDRINUSE)) return join();
  throw ConfigError(-1, "cannot host the rendezvous at " + o.rdzv_endpoint + " (" + std::strerror(err) +
                            (err == EADDRNOTAVAIL ? ": not an address of this machine" : "") +
                            "); give --rdzv-endpoint an address and free port of the host node");
}

}  // namespace cohort::launcher
