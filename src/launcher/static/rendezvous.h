// launcher/static/rendezvous.h — the agents of all nodes find each other before any worker starts.
//
// Node 0's agent listens on --master-addr at --master-port + 1 (the workers' store takes
// --master-port); every other agent connects there (retrying until --rdzv-timeout), says which
// node it is and how many workers it runs, and receives the world size and its first global rank.
// Each node may run a different number of workers; ranks are numbered node by node.
// The connections stay open afterwards as the coordination links (static/coordinators.h).
// This is round 0's rendezvous; later rounds (restarts) meet through the coordinators, which keep
// the world as it is (coordinator.h). An elastic job (--rdzv-endpoint) meets differently: see
// elastic/coordinators.h, whose host keeps listening and forms a new world for later rounds.
#pragma once

#include <memory>

#include "launcher/coordinator.h"
#include "launcher/config/options.h"
#include "launcher/io/signal_pipe.h"

namespace cohort::launcher {

struct RendezvousResult {
  Assignment assignment;  // round 0
  std::unique_ptr<Coordinator> coordinator;
};

/// Throws cohort::TimeoutError (a node missing), cohort::ConfigError (nodes disagree, address not
/// ours), Interrupted (SIGINT / SIGTERM / SIGHUP while waiting), or for an elastic spare node
/// JobFinished (the job ended before it got a place).
RendezvousResult rendezvous(RunOptions& options, SignalPipe& signals);

}  // namespace cohort::launcher
