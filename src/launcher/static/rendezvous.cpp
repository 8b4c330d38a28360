// The agents' rendezvous: node 0 hosts, the others join. See rendezvous.h.
#include "launcher/static/rendezvous.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>

#include "launcher/io/channel.h"
#include "launcher/io/doorway.h"
#include "cohort/error.h"
#include "launcher/elastic/coordinators.h"
#include "launcher/config/elastic_options.h"
#include "launcher/io/job_token.h"
#include "launcher/static/coordinators.h"
#include "launcher/io/waiting.h"
#include "launcher/protocol.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/io/socket_util.h"
#include "runtime/duration_text.h"

namespace cohort::launcher {
namespace {

using cohort::detail::seconds_text;

// Round 0 of a static job: the nodes, the store and the ranks are the options'.
Assignment first_assignment(const RunOptions& o, int world_size, int rank_base) {
  Assignment a;
  a.world_size = world_size;
  a.rank_base = rank_base;
  a.node_rank = o.node_rank;
  a.nnodes = o.nnodes;
  a.master_addr = o.master_addr;
  a.master_port = o.master_port;
  return a;
}

RendezvousResult host(const RunOptions& o, SignalPipe& signals) {
  const std::string where = o.master_addr + ":" + std::to_string(agent_port(o));
  UniqueFd listener(bind_tcp(o.master_addr, agent_port(o)));  // closed once everyone joined
  const auto deadline = deadline_in(o.rdzv_timeout_s);
  Doorway door(listener.get(), o.job_token);  // strangers' connections cost little (doorway.h)
  std::map<int, std::pair<std::unique_ptr<Channel>, int>> joined;  // node rank → link, nproc

  auto reject = [&](Channel& ch, const std::string& why) {
    ch.send({{"type", "reject"}, {"reason", why}});
    throw ConfigError(-1, why);
  };
  while (static_cast<int>(joined.size()) < o.nnodes - 1) {
    if (ms_left(deadline) == 0) {
      std::string missing;
      for (int n = 1; n < o.nnodes; ++n) {
        if (!joined.count(n)) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      }
      throw TimeoutError(-1, "only " + std::to_string(joined.size() + 1) + " of " + std::to_string(o.nnodes) +
                                 " nodes joined at " + where + " within " + seconds_text(o.rdzv_timeout_s) +
                                 " (missing node ranks " + missing + "); start cohort run on every node with --nnodes " +
                                 std::to_string(o.nnodes) + " and --master-addr " + o.master_addr);
    }
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    door.add_pollfds(fds);
    poll(fds.data(), fds.size(), std::min(ms_left(deadline), 200));
    signals.throw_if_interrupted();
    for (auto& [channel, m] : door.service(fds)) {
      int node = m.value("node_rank", -1), nnodes = m.value("nnodes", -1), nproc = m.value("nproc", 0);
      if (nnodes != o.nnodes) {
        reject(*channel, "node " + std::to_string(node) + " was started with --nnodes " + std::to_string(nnodes) +
                             " but node 0 with --nnodes " + std::to_string(o.nnodes));
      }
      // Node 0 decides about restarts and repairs for every node: they must agree on the rules.
      if (m.value("keep_survivors", false) != o.keep_survivors || m.value("max_restarts", o.max_restarts) != o.max_restarts) {
        auto rules = [](bool keep, int max) {
          return "--max-restarts " + std::to_string(max) + (keep ? " --keep-survivors" : " (no --keep-survivors)");
        };
        reject(*channel, "node " + std::to_string(node) + " was started with " +
                             rules(m.value("keep_survivors", false), m.value("max_restarts", 0)) + " but node 0 with " +
                             rules(o.keep_survivors, o.max_restarts) + "; start every node with the same");
      }
      if (node <= 0 || node >= o.nnodes || joined.count(node)) {
        reject(*channel, "two nodes were started with --node-rank " + std::to_string(node) +
                             "; give every node its own rank in 0.." + std::to_string(o.nnodes - 1));
      }
      joined[node] = {std::move(channel), nproc};
    }
  }

  RendezvousResult result;
  int base = o.nproc_per_node;
  std::vector<PeerLink> members;
  for (auto& [node, link] : joined) {
    members.push_back({node, base, std::move(link.first)});
    base += link.second;
  }
  result.assignment = first_assignment(o, base, 0);
  for (auto& m : members) {
    m.channel->send({{"type", "start"}, {"round", 0}, {"world_size", base}, {"rank_base", m.rank_base}});
  }
  result.coordinator = make_host_coordinator(std::move(members), result.assignment, o);
  return result;
}

RendezvousResult join(const RunOptions& o, SignalPipe& signals) {
  const std::string where = o.master_addr + ":" + std::to_string(agent_port(o));
  const auto deadline = deadline_in(o.rdzv_timeout_s);
  const std::string me = "node " + std::to_string(o.node_rank);
  int fd = -1, err = 0;
  while (fd < 0) {
    // Node 0 may start later than we do: keep trying until the deadline.
    fd = connect_tcp(o.master_addr, agent_port(o), std::max(1, std::min(ms_left(deadline), 1000)), &err);
    if (fd >= 0) break;
    if (ms_left(deadline) == 0) {
      throw TimeoutError(-1, me + " could not reach node 0's cohort run at " + where + " within " +
                                 seconds_text(o.rdzv_timeout_s) + " (" + std::strerror(err) +
                                 "); start it with the same --master-addr and --master-port, or raise --rdzv-timeout");
    }
    pollfd p{signals.fd(), POLLIN, 0};
    poll(&p, 1, std::min(ms_left(deadline), 200));
    signals.throw_if_interrupted();
  }
  auto channel = std::make_unique<Channel>(fd, o.job_token);
  channel->send({{"type", "join"},
                 {"node_rank", o.node_rank},
                 {"nnodes", o.nnodes},
                 {"nproc", o.nproc_per_node},
                 {"keep_survivors", o.keep_survivors},
                 {"max_restarts", o.max_restarts}});
  for (;;) {
    if (ms_left(deadline) == 0) {
      throw TimeoutError(-1, me + " reached node 0 at " + where + " but the other nodes did not all join within " +
                                 seconds_text(o.rdzv_timeout_s) + "; start cohort run on every node with --nnodes " +
                                 std::to_string(o.nnodes));
    }
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}, {channel->fd(), POLLIN, 0}};
    poll(fds.data(), fds.size(), std::min(ms_left(deadline), 200));
    signals.throw_if_interrupted();
    if (!(fds[1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    std::vector<nlohmann::json> messages;
    bool open = channel->receive(messages);
    for (const auto& m : messages) {
      const std::string type = m.value("type", "");
      if (type == "reject") throw ConfigError(-1, "node 0 refused " + me + ": " + m.value("reason", ""));
      if (type == "start") {
        RendezvousResult result;
        result.assignment = first_assignment(o, m.value("world_size", 0), m.value("rank_base", 0));
        result.coordinator = make_member_coordinator(std::move(channel), where, result.assignment, o);
        return result;
      }
    }
    if (!open) {
      const std::string refusal = channel->refusal();
      throw CommError(-1, "node 0's cohort run at " + where + " closed the connection during the rendezvous" +
                              (refusal.empty() ? "" : ": it refused this node's messages: " + refusal));
    }
  }
}

}  // namespace

RendezvousResult rendezvous(RunOptions& o, SignalPipe& signals) {
  if (is_elastic(o)) return elastic_rendezvous(o, signals);
  if (o.nnodes == 1) {
    ensure_private_job_token(o);
    RendezvousResult result;
    result.assignment = first_assignment(o, o.nproc_per_node, 0);
    result.coordinator = std::make_unique<SoloCoordinator>(result.assignment, o.max_restarts);
    return result;
  }
  if (o.node_rank == 0) {
    ensure_shared_job_token(o);
    return host(o, signals);
  }
  require_job_token(o, "node " + std::to_string(o.node_rank));
  return join(o, signals);
}

}  // namespace cohort::launcher
