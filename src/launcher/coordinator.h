// launcher/coordinator.h — what one agent tells the others, and hears from them, during a round and
// between rounds.
//
// The supervision loop (supervisor.h) and the agent's round loop (agent.cpp) talk only to this
// interface, so that one machine and many share one loop: SoloCoordinator has no peers; node 0's
// and the other nodes' coordinators (static/coordinators.h) exchange messages over the rendezvous
// connections; an elastic job's host and members (elastic/coordinators.h) also change the world
// between rounds. Node 0 (or the lone agent, or the elastic host) makes every decision, so all
// nodes agree on the round number.
#pragma once

#include <poll.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launcher/round.h"

namespace cohort::launcher {

class SignalPipe;

struct PeerEvent {
  enum Kind { failed, stopped, lost, repaired } kind;
  // failed: a worker failed on another node (node 0 then decides; the others hear node 0's verdict)
  // stopped: another node stopped the job for good (interrupted, could not start its workers)
  // lost: a peer's agent is gone
  // repaired: --keep-survivors: another node replaces a failed worker; this node's workers rejoin
  std::string text;  // the summary to print if the job ends here (repaired: the notice)
  std::optional<RoundFailure> failure;  // failed, repaired: the worker failure
  std::optional<RepairGrant> repair = std::nullopt;  // repaired: node 0's grant
};

class Coordinator {
 public:
  virtual ~Coordinator() = default;

  // --- while a round runs (the supervisor) ---
  virtual void add_pollfds(std::vector<pollfd>& fds) const = 0;
  /// Handles the coordinator's descriptors that poll() marked; returns the first peer event.
  virtual std::optional<PeerEvent> handle(const std::vector<pollfd>& ready) = 0;
  /// This node's workers all succeeded.
  virtual void local_done() = 0;
  /// Every node is done: the job succeeded (node 0 then tells the others).
  virtual bool job_done() = 0;

  // --- when a round ended without success (the agent), in this order ---
  /// Tells the other nodes at once — before this node stops its workers, so that every node stops
  /// in parallel. Node 0 (or the lone agent) decides here whether the job restarts.
  virtual void round_over(const Outcome& outcome) = 0;
  /// The decision about the round that ended: node 0's, which another node may have to wait for.
  /// (An elastic job decides only after every node stopped its workers, so its decision() holds
  /// the barrier, and next_round() returns the Assignment formed then.) Throws Interrupted.
  virtual RoundEnd decision(SignalPipe& signals) = 0;
  /// After a decision to restart, once this node's workers are all stopped: waits until every
  /// node's are (no worker of the next round starts while one of the last still runs anywhere) and
  /// returns this node's place in the next round. Throws Interrupted, or JobStopped when a node was
  /// lost, stopped the job or did not arrive in time.
  virtual Assignment next_round(SignalPipe& signals) = 0;

  // --- --keep-survivors (recovery/repair.h): one worker replaced while the others keep running ---
  /// Whether every worker of this node trains inside keep_running() and could rejoin; the
  /// supervisor says so on every turn, another node's coordinator tells node 0 when it changes.
  /// Node 0 grants a repair only while every other node's workers could rejoin.
  virtual void set_rejoinable(bool /*all*/) {}
  /// A worker of this node failed (`outcome`) and this node could replace it alone: asks node 0
  /// (node 0 and a lone agent decide themselves) whether it may, within the restarts left. A
  /// grant goes to every other node as well, whose workers then rejoin (PeerEvent::repaired).
  /// std::nullopt: the round ends as usual (round_over() next) — always for an elastic job, whose
  /// workers meet in a new world instead. Throws Interrupted.
  virtual std::optional<RepairGrant> request_repair(const Outcome& /*outcome*/, SignalPipe& /*signals*/) {
    return std::nullopt;
  }

  /// The job ends here for a reason found outside supervision (an interrupt between rounds, workers
  /// that could not start): tells the other nodes to stop for good, with the summary to print.
  virtual void abort(const std::string& summary) = 0;

  // --- monitoring (job_monitor.h): workers' metrics and events travel to the leading agent ---
  /// Another node's agent: sends one of its workers' "metrics"/"event" messages to node 0 as
  /// {"type":"monitor","node":n,"m":{...}}, never waiting (dropped when the link is backed up).
  virtual void forward_monitor(const nlohmann::json& /*message*/, int /*node*/) {}
  /// Node 0 (the leader): where the messages that other nodes forwarded go, as they are read.
  using MonitorSink = std::function<void(const nlohmann::json& message, int node)>;
  virtual void set_monitor_sink(MonitorSink /*sink*/) {}
};

/// One node: no peers, decisions are local.
class SoloCoordinator : public Coordinator {
 public:
  SoloCoordinator(Assignment first, int max_restarts) : assignment_(first), max_restarts_(max_restarts) {}
  void add_pollfds(std::vector<pollfd>&) const override {}
  std::optional<PeerEvent> handle(const std::vector<pollfd>&) override { return std::nullopt; }
  void local_done() override { done_ = true; }
  bool job_done() override { return done_; }
  void round_over(const Outcome& outcome) override {
    end_ = decide_round_end(outcome, assignment_.restarts, max_restarts_);
  }
  RoundEnd decision(SignalPipe&) override { return end_; }
  Assignment next_round(SignalPipe&) override {
    ++assignment_.round;
    ++assignment_.restarts;  // one node: every next round follows a worker failure
    generation_ = 0;
    done_ = false;
    return assignment_;
  }
  std::optional<RepairGrant> request_repair(const Outcome& outcome, SignalPipe&) override {
    if (!outcome.failure || assignment_.restarts >= max_restarts_) return std::nullopt;
    ++assignment_.restarts;  // a repair counts against --max-restarts like a restart
    return RepairGrant{outcome.failure->who.rank, assignment_.node_rank, ++generation_, assignment_.restarts};
  }
  void abort(const std::string&) override {}

 private:
  Assignment assignment_;
  int max_restarts_;
  RoundEnd end_;
  int generation_ = 0;  // repairs granted in this round
  bool done_ = false;
};

}  // namespace cohort::launcher
