// launcher/rendezvous.h — the agents of all nodes find each other before any worker starts.
//
// Node 0's agent listens on --master-addr at --master-port + 1 (the workers' store takes
// --master-port); every other agent connects there (retrying until --rdzv-timeout), says which
// node it is and how many workers it runs, and receives the world size and its first global rank.
// Each node may run a different number of workers; ranks are numbered node by node.
// The connections stay open afterwards as the coordination links (peer_coordinators.h).
// One round today; a later issue runs further rounds for restarts and changed membership.
#pragma once

#include <memory>
#include <stdexcept>

#include "coordinator.h"
#include "options.h"

namespace cohort::launcher {

class SignalPipe;

/// Thrown when SIGINT / SIGTERM / SIGHUP arrives while waiting.
struct Interrupted : std::runtime_error {
  explicit Interrupted(int sig) : std::runtime_error("interrupted"), signal(sig) {}
  int signal;
};

struct RendezvousResult {
  int world_size = 0;
  int rank_base = 0;  // global rank of this node's local rank 0
  std::unique_ptr<Coordinator> coordinator;
};

/// Throws cohort::TimeoutError (a node missing), cohort::ConfigError (nodes disagree, address not
/// ours) or Interrupted.
RendezvousResult rendezvous(const RunOptions& options, SignalPipe& signals);

}  // namespace cohort::launcher
