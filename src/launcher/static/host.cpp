// Node 0's coordinator: hears every node, decides about every round, keeps the nodes in step
// between rounds. See static/coordinators.h for the protocol.
#include <sstream>

#include "launcher/static/coordinators.h"
#include "launcher/io/waiting.h"
#include "launcher/protocol.h"

namespace cohort::launcher {
namespace {

class HostCoordinator : public Coordinator {
 public:
  HostCoordinator(std::vector<PeerLink> members, Assignment first, const RunOptions& o)
      : own_(first), max_restarts_(o.max_restarts), barrier_timeout_s_(o.stop_grace_s + o.rdzv_timeout_s) {
    for (auto& m : members) members_.push_back({std::move(m)});
  }

  void add_pollfds(std::vector<pollfd>& fds) const override {
    for (const auto& m : members_) {
      if (m.link.channel) fds.push_back({m.link.channel->fd(), POLLIN, 0});
    }
  }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    std::optional<PeerEvent> event;
    for (auto& m : members_) {
      if (!m.link.channel || !is_ready(fds, m.link.channel->fd())) continue;
      std::vector<nlohmann::json> messages;
      bool open = m.link.channel->receive(messages);
      for (const auto& msg : messages) {
        if (take_monitor(msg, m.link.node_rank)) continue;
        if (round_of(msg) != own_.round) continue;  // late news about an earlier round
        const std::string type = msg.value("type", "");
        if (type == "done") m.done = true;
        if (type == "rejoinable") m.rejoinable = msg.value("value", false);
        if (type == "repair" && !event) event = answer_repair(m, msg);
        if (type == "fail" && !event) event = PeerEvent{PeerEvent::failed, msg.value("summary", ""), failure_from(msg)};
        if (type == "abort" && !event) event = PeerEvent{PeerEvent::stopped, msg.value("summary", ""), std::nullopt};
      }
      if (!open) {
        m.link.channel.reset();
        if (!m.done && !event) event = PeerEvent{PeerEvent::lost, lost_text(m), std::nullopt};
      }
    }
    return event;
  }

  void local_done() override { done_ = true; }

  bool job_done() override {
    if (!done_) return false;
    for (const auto& m : members_) {
      if (!m.done) return false;
    }
    broadcast({{"type", "finish"}, {"round", own_.round}});
    return true;
  }

  void set_rejoinable(bool all) override { own_rejoinable_ = all; }

  // Node 0's own worker failed: every other node's workers must be able to rejoin.
  std::optional<RepairGrant> request_repair(const Outcome& outcome, SignalPipe&) override {
    if (!outcome.failure || !may_repair(nullptr)) return std::nullopt;
    own_rejoinable_ = false;  // until the replacement trains in keep_running() too
    return grant(*outcome.failure, own_.node_rank);
  }

  void round_over(const Outcome& outcome) override {
    end_ = decide_round_end(outcome, own_.restarts, max_restarts_);
    nlohmann::json stop{{"type", "stop"}, {"round", own_.round}, {"restart", end_.restart}, {"summary", end_.summary}};
    if (end_.failure) stop["failure"] = failure_to_json(*end_.failure);
    broadcast(stop);
  }

  RoundEnd decision(SignalPipe&) override { return end_; }

  Assignment next_round(SignalPipe& signals) override {
    const auto deadline = deadline_in(barrier_timeout_s_);
    for (auto& m : members_) m.stopped = false;
    for (;;) {
      std::string missing;
      for (auto& m : members_) {
        if (!m.link.channel) stop_for_good(lost_text(m));
        if (!m.stopped) missing += (missing.empty() ? "" : ", ") + std::to_string(m.link.node_rank);
      }
      if (missing.empty()) break;
      if (ms_left(deadline) == 0) {
        std::ostringstream os;
        os << "cohort run: job failed: node(s) " << missing << " did not stop their workers of round " << own_.round
           << " within " << barrier_timeout_s_ << " s (--stop-timeout + --rdzv-timeout); not restarting\n";
        stop_for_good(os.str());
      }
      std::vector<Channel*> channels;
      for (auto& m : members_) channels.push_back(m.link.channel.get());
      std::vector<pollfd> fds = wait_for_channels(channels, signals, std::min(ms_left(deadline), 200));
      for (auto& m : members_) {
        if (!m.link.channel || !is_ready(fds, m.link.channel->fd())) continue;
        std::vector<nlohmann::json> messages;
        bool open = m.link.channel->receive(messages);
        for (const auto& msg : messages) {
          if (take_monitor(msg, m.link.node_rank)) continue;
          if (round_of(msg) != own_.round) continue;
          const std::string type = msg.value("type", "");
          if (type == "stopped") m.stopped = true;
          if (type == "abort") stop_for_good(msg.value("summary", ""));
          // "fail" and "done" of the round that just ended change nothing now.
        }
        if (!open) m.link.channel.reset();  // reported as lost at the top of the loop
      }
    }
    // Every node's workers are gone. Static membership: same world, same ranks, next round.
    // (Elastic membership will form the new world here, from the nodes that are still present.)
    ++own_.round;
    ++own_.restarts;  // static membership: every next round follows a worker failure
    generation_ = 0;
    done_ = false;
    own_rejoinable_ = false;
    for (auto& m : members_) {
      m.done = false;
      m.rejoinable = false;
      m.link.channel->send({{"type", "start"},
                            {"round", own_.round},
                            {"world_size", own_.world_size},
                            {"rank_base", m.link.rank_base},
                            {"restarts", own_.restarts}});
    }
    return own_;
  }

  void abort(const std::string& summary) override {
    broadcast({{"type", "stop"}, {"round", own_.round}, {"restart", false}, {"summary", summary}});
  }

  void set_monitor_sink(MonitorSink sink) override { sink_ = std::move(sink); }

 private:
  // A worker's message that node `node` forwarded: to the hub, whatever the round.
  bool take_monitor(const nlohmann::json& msg, int node) {
    if (msg.value("type", "") != "monitor") return false;
    if (sink_ && msg.contains("m")) sink_(msg["m"], msg.value("node", node));
    return true;
  }

  struct Member {
    PeerLink link;
    bool done = false;
    bool stopped = false;
    bool rejoinable = false;  // its last "rejoinable" word: all its workers could rejoin
  };

  // --keep-survivors: a repair may be granted while restarts are left and every node but the one
  // that asks (`asking`; nullptr: node 0) has all its workers in keep_running().
  bool may_repair(const Member* asking) const {
    if (own_.restarts >= max_restarts_) return false;
    if (asking != nullptr && !own_rejoinable_) return false;
    for (const auto& m : members_)
      if (&m != asking && (!m.link.channel || !m.rejoinable)) return false;
    return true;
  }

  // Grants the repair of `failure`'s rank on node `node` and tells every other node (the one
  // that asked takes the grant as its answer; the others' workers rejoin).
  RepairGrant grant(const RoundFailure& failure, int node) {
    ++own_.restarts;  // a repair counts against --max-restarts like a restart
    const RepairGrant g{failure.who.rank, node, ++generation_, own_.restarts};
    broadcast({{"type", "rejoin"},
               {"round", own_.round},
               {"rank", g.rank},
               {"node", g.node},
               {"generation", g.generation},
               {"restarts", g.restarts},
               {"failure", failure_to_json(failure)}});
    return g;
  }

  // Node `m` asks to replace its failed worker: granted, node 0's workers rejoin (PeerEvent
  // repaired); refused, the failure ends the round like a "fail", and the "stop" that follows
  // (round_over) is the asking node's answer.
  PeerEvent answer_repair(Member& m, const nlohmann::json& msg) {
    const auto failure = failure_from(msg);
    if (!failure || !may_repair(&m)) return PeerEvent{PeerEvent::failed, msg.value("summary", ""), failure, std::nullopt};
    m.rejoinable = false;  // until its replacement trains in keep_running() too (it says so)
    const RepairGrant g = grant(*failure, m.link.node_rank);
    return PeerEvent{PeerEvent::repaired, repair_notice(*failure, g, max_restarts_), failure, g};
  }

  static std::string lost_text(const Member& m) {
    return "cohort run: job failed: lost contact with node " + std::to_string(m.link.node_rank) +
           "'s cohort run (it exited or became unreachable)\n";
  }

  void broadcast(const nlohmann::json& message) {
    for (auto& m : members_) {
      if (m.link.channel) m.link.channel->send(message);
    }
  }

  [[noreturn]] void stop_for_good(const std::string& summary) {
    abort(summary);
    throw JobStopped(summary);
  }

  std::vector<Member> members_;
  Assignment own_;
  int max_restarts_;
  double barrier_timeout_s_;
  RoundEnd end_;
  bool done_ = false;
  bool own_rejoinable_ = false;  // node 0's workers could all rejoin (set_rejoinable)
  int generation_ = 0;           // repairs granted in this round
  MonitorSink sink_;
};

}  // namespace

std::unique_ptr<Coordinator> make_host_coordinator(std::vector<PeerLink> members, Assignment first,
                                                   const RunOptions& options) {
  return std::make_unique<HostCoordinator>(std::move(members), first, options);
}

}  // namespace cohort::launcher
