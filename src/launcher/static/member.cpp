// Another node's coordinator: reports to node 0 and follows its decisions. See static/coordinators.h
// for the protocol.
#include <sstream>

#include "launcher/static/coordinators.h"
#include "launcher/io/waiting.h"
#include "launcher/protocol.h"

namespace cohort::launcher {
namespace {

class MemberCoordinator : public Coordinator {
 public:
  MemberCoordinator(std::unique_ptr<Channel> host, std::string where, Assignment first, const RunOptions& o)
      : host_(std::move(host)),
        where_(std::move(where)),
        own_(first),
        // Node 0 answers a failure at once, but waits up to --stop-timeout + --rdzv-timeout for every
        // node to stop; wait longer than that, so that node 0 is the one to report who is missing.
        wait_s_(2 * (o.stop_grace_s + o.rdzv_timeout_s)),
        max_restarts_(o.max_restarts) {}

  void add_pollfds(std::vector<pollfd>& fds) const override {
    if (host_) fds.push_back({host_->fd(), POLLIN, 0});
  }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    if (host_) host_->flush();  // forwarded metrics still queued (forward_monitor)
    if (host_ && !decided_ && !rejoins_.empty()) return next_rejoin();  // one that came during request_repair()
    if (!host_ || !is_ready(fds, host_->fd())) return std::nullopt;
    std::optional<PeerEvent> event;
    bool open = receive([&](const nlohmann::json& msg, const std::string& type) {
      if (round_of(msg) != own_.round) return;
      if (type == "finish") finished_ = true;
      if (type == "stop") take_stop(msg);
      if (type == "rejoin") take_rejoin(msg);
    });
    if (open && !decided_ && !rejoins_.empty()) return next_rejoin();  // another node replaces a worker
    if (decided_) {
      event = PeerEvent{decided_->failure ? PeerEvent::failed : PeerEvent::stopped, decided_->summary,
                        decided_->failure};
    }
    if (!open && !finished_ && !event) {
      decided_ = RoundEnd{false, lost_text(), std::nullopt, ""};
      event = PeerEvent{PeerEvent::lost, lost_text(), std::nullopt};
    }
    return event;
  }

  void local_done() override { send({{"type", "done"}, {"round", own_.round}}); }

  bool job_done() override { return finished_; }

  void set_rejoinable(bool all) override {
    if (all == told_rejoinable_) return;
    told_rejoinable_ = all;
    send({{"type", "rejoinable"}, {"round", own_.round}, {"value", all}});
  }

  // Asks node 0 and waits for its answer: a "rejoin" naming the failed rank (granted), or the
  // round's "stop" (refused: the failure ended the round).
  std::optional<RepairGrant> request_repair(const Outcome& outcome, SignalPipe& signals) override {
    if (!outcome.failure || decided_ || !host_) return std::nullopt;
    nlohmann::json ask{{"type", "repair"}, {"round", own_.round}, {"summary", outcome.summary}};
    ask["failure"] = failure_to_json(*outcome.failure);
    send(ask);
    told_rejoinable_ = false;  // node 0 counts this node out until it says otherwise
    const int rank = outcome.failure->who.rank;
    const auto deadline = deadline_in(wait_s_);
    std::optional<RepairGrant> granted;
    while (!granted && !decided_ && host_ && ms_left(deadline) > 0) {
      std::vector<pollfd> fds = wait_for_channels({host_.get()}, signals, std::min(ms_left(deadline), 200));
      if (!is_ready(fds, host_->fd())) continue;
      receive([&](const nlohmann::json& msg, const std::string& type) {
        if (round_of(msg) != own_.round) return;
        if (type == "stop") take_stop(msg);
        if (type == "finish") finished_ = true;
        if (type != "rejoin") return;
        if (msg.value("rank", -1) == rank && msg.value("node", -1) == own_.node_rank) {
          granted = grant_from(msg);
          own_.restarts = granted->restarts;
        } else {
          take_rejoin(msg);  // another node's repair, granted meanwhile: handle() hands it on
        }
      });
    }
    return granted;
  }

  void round_over(const Outcome& outcome) override {
    if (decided_) return;  // the round ended with node 0's "stop": nothing to tell it
    if (outcome.kind == Outcome::worker_failed) {
      nlohmann::json fail{{"type", "fail"}, {"round", own_.round}, {"summary", outcome.summary}};
      if (outcome.failure) fail["failure"] = failure_to_json(*outcome.failure);
      send(fail);  // node 0 decides whether the job restarts; decision() waits for it
    } else if (outcome.kind == Outcome::peer_lost) {
      decided_ = RoundEnd{false, outcome.summary, std::nullopt, ""};
    } else {
      abort(outcome.summary);  // interrupted: this node stops the job for good, without waiting
      decided_ = RoundEnd{false, outcome.summary, std::nullopt, ""};
    }
  }

  RoundEnd decision(SignalPipe& signals) override {
    const auto deadline = deadline_in(wait_s_);
    while (!decided_) {
      if (!host_) {
        decided_ = RoundEnd{false, lost_text(), std::nullopt, ""};
        break;
      }
      if (ms_left(deadline) == 0) {
        const std::string what = "answer the failure of round " + std::to_string(own_.round);
        decided_ = RoundEnd{false, silent_text(what), std::nullopt, ""};
        break;
      }
      std::vector<pollfd> fds = wait_for_channels({host_.get()}, signals, std::min(ms_left(deadline), 200));
      if (!is_ready(fds, host_->fd())) continue;
      receive([&](const nlohmann::json& msg, const std::string& type) {
        if (type == "stop" && round_of(msg) == own_.round) take_stop(msg);
      });
    }
    return *decided_;
  }

  Assignment next_round(SignalPipe& signals) override {
    send({{"type", "stopped"}, {"round", own_.round}});
    const auto deadline = deadline_in(wait_s_);
    for (;;) {
      if (!host_) throw JobStopped(lost_text());
      if (ms_left(deadline) == 0) {
        throw JobStopped(silent_text("start round " + std::to_string(own_.round + 1)));
      }
      std::vector<pollfd> fds = wait_for_channels({host_.get()}, signals, std::min(ms_left(deadline), 200));
      if (!is_ready(fds, host_->fd())) continue;
      std::optional<Assignment> next;
      std::optional<std::string> stopped;
      receive([&](const nlohmann::json& msg, const std::string& type) {
        if (type == "start" && round_of(msg) == own_.round + 1) {
          next = own_;  // the same node and store; node 0 says the world and the restarts
          next->round = own_.round + 1;
          next->restarts = msg.value("restarts", own_.round + 1);
          next->world_size = msg.value("world_size", 0);
          next->rank_base = msg.value("rank_base", 0);
        }
        if (type == "stop" && !stopped) stopped = msg.value("summary", "");  // node 0 gave up meanwhile
      });
      if (stopped) throw JobStopped(*stopped);
      if (next) {
        own_ = *next;
        finished_ = false;
        decided_.reset();
        rejoins_.clear();
        told_rejoinable_ = false;
        return own_;
      }
    }
  }

  void abort(const std::string& summary) override {
    send({{"type", "abort"}, {"round", own_.round}, {"summary", summary}});
  }

  void forward_monitor(const nlohmann::json& message, int node) override {
    if (host_) host_->send_droppable({{"type", "monitor"}, {"node", node}, {"m", message}});
  }

 private:
  // Reads what node 0 sent, calling on_message(message, type) for each; returns false (and drops
  // the link) once node 0's connection is closed.
  template <typename F>
  bool receive(F on_message) {
    std::vector<nlohmann::json> messages;
    bool open = host_->receive(messages);
    for (const auto& msg : messages) on_message(msg, msg.value("type", ""));
    if (!open) host_.reset();
    return open;
  }

  void send(const nlohmann::json& message) {
    if (host_) host_->send(message);
  }

  static RepairGrant grant_from(const nlohmann::json& msg) {
    return RepairGrant{msg.value("rank", -1), msg.value("node", -1), msg.value("generation", 0), msg.value("restarts", 0)};
  }

  PeerEvent next_rejoin() {
    PeerEvent event = std::move(rejoins_.front());
    rejoins_.erase(rejoins_.begin());
    return event;
  }

  // Node 0 granted another node's repair: this node's workers are to rejoin (handle() returns it).
  void take_rejoin(const nlohmann::json& msg) {
    const RepairGrant g = grant_from(msg);
    own_.restarts = g.restarts;
    const auto failure = failure_from(msg);
    if (!failure) return;
    rejoins_.push_back(PeerEvent{PeerEvent::repaired, repair_notice(*failure, g, max_restarts_), failure, g});
  }

  // Node 0's "stop" for this round. A second one that says "no restart" (node 0 was interrupted
  // or lost a node right after deciding to restart) overrides the first.
  void take_stop(const nlohmann::json& stop) {
    RoundEnd end{stop.value("restart", false), stop.value("summary", ""), failure_from(stop), ""};
    if (decided_ && (!decided_->restart || end.restart)) return;
    if (decided_ && !end.failure) end.failure = decided_->failure;
    decided_ = end;
  }

  std::string lost_text() const {
    return "cohort run: job failed: lost contact with node 0's cohort run at " + where_ +
           " (it exited or became unreachable)\n";
  }

  std::string silent_text(const std::string& what) const {
    std::ostringstream os;
    os << "cohort run: job failed: node 0's cohort run at " << where_ << " did not " << what << " within " << wait_s_
       << " s\n";
    return os.str();
  }

  std::unique_ptr<Channel> host_;
  std::string where_;
  Assignment own_;
  double wait_s_;
  std::optional<RoundEnd> decided_;  // node 0's decision about the current round, once known
  bool finished_ = false;
  int max_restarts_;
  bool told_rejoinable_ = false;     // what node 0 last heard: all this node's workers could rejoin
  std::vector<PeerEvent> rejoins_;   // other nodes' repairs not yet handed to the supervisor
};

}  // namespace

std::unique_ptr<Coordinator> make_member_coordinator(std::unique_ptr<Channel> host, const std::string& where,
                                                     Assignment first, const RunOptions& options) {
  return std::make_unique<MemberCoordinator>(std::move(host), where, first, options);
}

}  // namespace cohort::launcher
