// launcher/elastic/roster.h — the elastic host's view of the other agents: it accepts connections at
// the endpoint, admits or refuses joins (--rdzv-id, --nnodes), reads every node's messages, keeps
// the heartbeats going, and drops a node whose connection closed or that fell silent for
// --node-timeout. What a message or a loss means for the job is the host's (elastic/host.cpp).
#pragma once

#include <poll.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/elastic/heartbeat.h"
#include "launcher/config/options.h"
#include "launcher/io/doorway.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {

struct RosterNode {
  int id;             // join order, for the node's life (the host, 0, is not a RosterNode)
  int nproc;          // its workers
  std::string label;  // "10.0.0.2 (cohort run pid 4242)", for messages
  Link link;
  // The host's bookkeeping for the current round.
  bool seated = false;  // in the round (else a spare)
  int node_rank = -1;
  int rank_base = 0;
  bool done = false;     // its workers all succeeded
  bool stopped = false;  // its workers are gone after the round ended
};

class RosterEvents {
 public:
  virtual void on_message(RosterNode& node, const nlohmann::json& message) = 0;
  /// A node was admitted; returns the note it prints while it waits for its place (may be empty).
  virtual std::string on_joined(RosterNode& node) = 0;
  /// A node is gone (already removed from the roster).
  virtual void on_lost(const RosterNode& node, const std::string& why) = 0;

 protected:
  ~RosterEvents() = default;
};

class Roster {
 public:
  Roster(const RunOptions& options, int listener);  // owns `listener`, bound at the endpoint

  void add_pollfds(std::vector<pollfd>& fds) const;
  /// New connections, joins, the nodes' messages and losses, as poll() marked them.
  void service(const std::vector<pollfd>& fds, RosterEvents& events);
  /// Removes node i, telling it why in case it still listens (dropped, not dead).
  void drop(size_t i, const std::string& why, RosterEvents& events);

  std::vector<RosterNode>& nodes() { return nodes_; }
  const std::vector<RosterNode>& nodes() const { return nodes_; }
  void broadcast(const nlohmann::json& message);

 private:
  void admit(Link& link, const nlohmann::json& join, RosterEvents& events);

  const RunOptions o_;
  UniqueFd listener_;
  Doorway door_;                   // connected, not joined yet (io/doorway.h)
  HeartbeatSender beats_;
  std::vector<RosterNode> nodes_;  // joined, in id order
  int next_id_ = 1;
};

}  // namespace cohort::launcher
