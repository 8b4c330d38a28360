// launcher/peer_coordinators.h — the coordinators of a job on several machines (see coordinator.h).
//
// Star-shaped: node 0's agent holds one connection to every other node's agent.
//   member → node 0:  {"type":"done"}                 its workers all succeeded
//                     {"type":"fail","summary":...}   a worker failed there (or it was interrupted)
//   node 0 → members: {"type":"stop","summary":...}   stop your workers: the job failed
//                     {"type":"finish"}               every node is done: exit 0
// A connection that closes before "done"/"finish" means that agent is gone: the job fails.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "channel.h"
#include "coordinator.h"

namespace cohort::launcher {

struct PeerLink {
  int node_rank;
  std::unique_ptr<Channel> channel;
};

/// Node 0's side, with one link per other node.
std::unique_ptr<Coordinator> make_host_coordinator(std::vector<PeerLink> members);

/// Another node's side, with its link to node 0 (`where` names node 0's address in messages).
std::unique_ptr<Coordinator> make_member_coordinator(std::unique_ptr<Channel> host, const std::string& where);

}  // namespace cohort::launcher
