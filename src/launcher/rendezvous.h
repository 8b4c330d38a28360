// launcher/rendezvous.h — the agents of all nodes find each other before any worker starts.
//
// Node 0's agent listens on --master-addr at --master-port + 1 (the workers' store takes
// --master-port); every other agent connects there (retrying until --rdzv-timeout), says which
// node it is and how many workers it runs, and receives the world size and its first global rank.
// Each node may run a different number of workers; ranks are numbered node by node.
// The connections stay open afterwards as the coordination links (peer_coordinators.h).
// This is round 0's rendezvous; later rounds (restarts) meet through the coordinators, which keep
// the world as it is (coordinator.h). Elastic membership will keep node 0's listener open and form
// a new world for a later round here.
#pragma once

#include <memory>

#include "coordinator.h"
#include "options.h"
#include "signal_pipe.h"

namespace cohort::launcher {

struct RendezvousResult {
  Assignment assignment;  // round 0
  std::unique_ptr<Coordinator> coordinator;
};

/// Throws cohort::TimeoutError (a node missing), cohort::ConfigError (nodes disagree, address not
/// ours) or Interrupted (SIGINT / SIGTERM / SIGHUP while waiting).
RendezvousResult rendezvous(const RunOptions& options, SignalPipe& signals);

}  // namespace cohort::launcher
