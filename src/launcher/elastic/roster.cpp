// The elastic host's roster of agents. See elastic/roster.h.
#include "launcher/elastic/roster.h"

#include <iostream>
#include <sstream>

#include "launcher/io/waiting.h"
#include "launcher/protocol.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {
namespace {

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s << " s";
  return os.str();
}

}  // namespace

Roster::Roster(const RunOptions& o, int listener)
    : o_(o), listener_(listener), door_(listener, o.job_token), beats_(o.node_timeout_s / 5) {}

void Roster::add_pollfds(std::vector<pollfd>& fds) const {
  door_.add_pollfds(fds);
  for (const auto& n : nodes_) fds.push_back({n.link.fd(), POLLIN, 0});
}

void Roster::service(const std::vector<pollfd>& fds, RosterEvents& events) {
  for (auto& arrival : door_.service(fds)) {
    Link link(std::shared_ptr<Channel>(std::move(arrival.channel)));
    admit(link, arrival.join, events);
  }
  for (size_t i = 0; i < nodes_.size();) {
    std::vector<nlohmann::json> messages;
    // Read before judging silence: what arrived while the host was busy still counts.
    const bool open = !is_ready(fds, nodes_[i].link.fd()) || nodes_[i].link.receive(messages);
    for (const auto& m : messages) events.on_message(nodes_[i], m);
    const std::string why = !open ? "its connection closed"
                            : nodes_[i].link.silent_for(o_.node_timeout_s)
                                ? "no message for " + seconds_text(o_.node_timeout_s)
                                : "";
    if (why.empty()) {
      ++i;
    } else {
      drop(i, why, events);
    }
  }
}

void Roster::drop(size_t i, const std::string& why, RosterEvents& events) {
  RosterNode n = std::move(nodes_[i]);
  nodes_.erase(nodes_.begin() + static_cast<long>(i));
  beats_.remove(n.link.channel.get());
  n.link.channel->send({{"type", "end"},
                        {"summary", "cohort run: job stopped on this node: the rendezvous host at " + o_.rdzv_endpoint +
                                        " dropped it (" + why + ")\n"}});
  events.on_lost(n, why);
}  // the connection closes with `n`

void Roster::broadcast(const nlohmann::json& message) {
  for (auto& n : nodes_) n.link.channel->send(message);
}

void Roster::admit(Link& link, const nlohmann::json& join, RosterEvents& events) {
  const std::string label = peer_address(link.fd()) + " (cohort run pid " + std::to_string(join.value("pid", 0)) + ")";
  const std::string id = join.value("rdzv_id", "");
  const std::string range = std::to_string(o_.min_nodes) + ":" + std::to_string(o_.max_nodes);
  const std::string theirs = std::to_string(join.value("min", 0)) + ":" + std::to_string(join.value("max", 0));
  std::string refusal;
  if (id != o_.rdzv_id) {
    refusal = "the rendezvous at " + o_.rdzv_endpoint + " is job '" + o_.rdzv_id + "', not '" + id +
              "' (--rdzv-id); start this node with --rdzv-id " + o_.rdzv_id + ", or give job '" + id +
              "' its own --rdzv-endpoint";
    std::cerr << "cohort run: refused a node at " << label << ": it asked for job '" << id << "', this is job '"
              << o_.rdzv_id << "'" << std::endl;
  } else if (theirs != range) {
    refusal = "job '" + o_.rdzv_id + "' runs with --nnodes " + range + ", this node was started with --nnodes " +
              theirs + "; start every node with the same --nnodes";
    std::cerr << "cohort run: refused a node at " << label << ": it was started with --nnodes " << theirs
              << ", this job has " << range << std::endl;
  }
  if (!refusal.empty()) {
    link.channel->send({{"type", "reject"}, {"reason", refusal}, {"timeout", false}});
    return;
  }
  nodes_.push_back(RosterNode{next_id_++, std::max(1, join.value("nproc", 1)), label, link});
  RosterNode& n = nodes_.back();
  beats_.add(n.link.channel);
  n.link.channel->send({{"type", "wait"}, {"note", events.on_joined(n)}});
}

}  // namespace cohort::launcher
