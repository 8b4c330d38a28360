// launcher/coordinator.h — what one agent tells the others, and hears from them, while workers run.
//
// The supervision loop (supervisor.h) talks only to this interface, so that one machine and many
// share one loop: SoloCoordinator has no peers; node 0's and the other nodes' coordinators
// (peer_coordinators.h) exchange done / fail / stop / finish messages over the rendezvous
// connections. Heartbeats and restart rounds of a later issue belong here too.
#pragma once

#include <poll.h>

#include <optional>
#include <string>
#include <vector>

namespace cohort::launcher {

struct PeerEvent {
  enum Kind { failed, lost } kind;
  std::string text;  // failed: the failing node's summary; lost: one line naming the node
};

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual void add_pollfds(std::vector<pollfd>& fds) const = 0;
  /// Handles the coordinator's descriptors that poll() marked; returns the first peer event.
  virtual std::optional<PeerEvent> handle(const std::vector<pollfd>& ready) = 0;
  /// This node's workers all succeeded.
  virtual void local_done() = 0;
  /// The job must stop (a worker failed here or elsewhere, an interrupt, a lost peer): tells the
  /// other nodes, with the summary they should print.
  virtual void abort(const std::string& summary) = 0;
  /// Every node is done: the job succeeded (node 0 then tells the others).
  virtual bool job_done() = 0;
};

class SoloCoordinator : public Coordinator {
 public:
  void add_pollfds(std::vector<pollfd>&) const override {}
  std::optional<PeerEvent> handle(const std::vector<pollfd>&) override { return std::nullopt; }
  void local_done() override { done_ = true; }
  void abort(const std::string&) override {}
  bool job_done() override { return done_; }

 private:
  bool done_ = false;
};

}  // namespace cohort::launcher
