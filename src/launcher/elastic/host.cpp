// The host of an elastic job: forms every round from the nodes present, hears every node and decides
// about every round. See elastic/coordinators.h for the protocol and the rules, membership.h for
// the seating, elastic/roster.h for the connections to the other agents.
#include <iostream>
#include <set>

#include "cohort/error.h"
#include "launcher/elastic/coordinators.h"
#include "launcher/config/elastic_options.h"
#include "launcher/elastic/roster.h"
#include "launcher/failure_history.h"
#include "launcher/config/host_info.h"
#include "launcher/elastic/membership.h"
#include "runtime/duration_text.h"
#include "launcher/io/waiting.h"
#include "launcher/protocol.h"
#include "launcher/io/signal_pipe.h"

namespace cohort::launcher {
namespace {

std::string plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

class ElasticHost : public Coordinator, private RosterEvents {
 public:
  ElasticHost(const RunOptions& o, int listener) : o_(o), where_(o.rdzv_endpoint), roster_(o, listener) {
    own_.master_addr = parse_endpoint(o.rdzv_endpoint).host;
    // The store stays on this machine and port for the whole job (see agent.cpp's local_places).
    own_.master_port = o.master_port > 0 ? o.master_port : pick_free_port(own_.master_addr);
  }

  Assignment form_first_round(SignalPipe& signals) {
    try {
      if (!gather(signals, deadline_in(o_.rdzv_timeout_s))) {
        const std::string why = "only " + std::to_string(present()) + " of the at least " +
                                std::to_string(o_.min_nodes) + " nodes (--nnodes " + range() + ") joined job '" +
                                o_.rdzv_id + "' at " + where_ + " within " + cohort::detail::seconds_text(o_.rdzv_timeout_s) +
                                " (--rdzv-timeout); start cohort run with --rdzv-endpoint " + where_ +
                                " --rdzv-id " + o_.rdzv_id + " on more nodes, or lower MIN";
        roster_.broadcast({{"type", "reject"}, {"reason", why}, {"timeout", true}});
        throw TimeoutError(-1, why);
      }
    } catch (const Interrupted&) {
      end_job("cohort run: job stopped: the rendezvous host at " + where_ + " was interrupted before the job formed\n",
              std::nullopt);
      throw;
    }
    seat_round();
    send_starts("", std::nullopt);
    if (o_.verbose) {
      std::cerr << "cohort run: elastic job '" << o_.rdzv_id << "' formed at " << where_ << ": "
                << plural(own_.nnodes, "node") << ", " << plural(own_.world_size, "worker") << std::endl;
    }
    return own_;
  }

  // --- while a round runs ---
  void add_pollfds(std::vector<pollfd>& fds) const override { roster_.add_pollfds(fds); }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    roster_.service(fds, *this);
    if (abort_) return PeerEvent{PeerEvent::stopped, *abort_, std::nullopt};
    if (failure_event_) return failure_event_;
    if (!lost_.empty()) return PeerEvent{PeerEvent::lost, "cohort run: job failed: " + lost_text() + "\n", std::nullopt};
    if (spare_fits()) return PeerEvent{PeerEvent::stopped, "", std::nullopt};  // a node joins: form again
    return std::nullopt;
  }

  void local_done() override { done_ = true; }

  bool job_done() override {
    if (!done_) return false;
    for (const auto& n : roster_.nodes()) {
      if (n.seated && !n.done) return false;
    }
    roster_.broadcast({{"type", "finish"}, {"round", own_.round}});  // spares too: they exit 0
    return true;
  }

  // --- between rounds ---
  void round_over(const Outcome& outcome) override {
    if (outcome.kind == Outcome::interrupted || abort_) {
      end_job(abort_ ? *abort_ : outcome.summary, std::nullopt);
      return;
    }
    if (outcome.kind == Outcome::worker_failed || outcome.kind == Outcome::peer_failed) {
      failure_ = outcome.failure;
      failure_summary_ = outcome.summary;
    }
    for (auto& n : roster_.nodes()) {
      if (n.seated) n.link.channel->send({{"type", "stop"}, {"round", own_.round}});
    }
  }

  RoundEnd decision(SignalPipe& signals) override {
    if (ended_) return *ended_;
    barrier(signals);
    if (abort_) return end_job(*abort_, std::nullopt);
    // Decide only now that every node stopped: a node lost meanwhile is known, and the failures
    // its loss caused elsewhere are not taken for a worker failure of their own.
    const bool restart = lost_.empty() && failure_;
    if (restart && own_.restarts >= o_.max_restarts) return end_job(failure_summary_, failure_);
    const std::optional<RoundFailure> failure = restart ? failure_ : std::nullopt;
    std::string why = lost_text();
    std::set<int> was_seated;
    for (const auto& n : roster_.nodes()) {
      if (n.seated) was_seated.insert(n.id);
    }
    if (present() < o_.min_nodes) {
      const std::string wait = "cohort run: round " + std::to_string(own_.round) + " ended: " + why + "; " +
                               plural(present(), "node") + " left, fewer than the minimum of " +
                               std::to_string(o_.min_nodes) + " (--nnodes " + range() + "): waiting up to " +
                               cohort::detail::seconds_text(o_.rdzv_timeout_s) + " (--rdzv-timeout) for more\n";
      std::cerr << wait << std::flush;
      roster_.broadcast({{"type", "wait"}, {"note", wait}});
      if (!gather(signals, deadline_in(o_.rdzv_timeout_s))) {
        return end_job("cohort run: job failed: " + why + "; no node joined within " +
                           cohort::detail::seconds_text(o_.rdzv_timeout_s) + " to make the minimum of " +
                           std::to_string(o_.min_nodes) + " nodes (--nnodes " + range() + ")\n",
                       std::nullopt);
      }
    }
    const int ended_round = own_.round;
    ++own_.round;
    if (restart) ++own_.restarts;
    seat_round();
    for (const auto& n : roster_.nodes()) {
      if (n.seated && !was_seated.count(n.id)) why += std::string(why.empty() ? "" : "; ") + "node at " + n.label + " joined";
    }
    if (why.empty()) why = "the nodes changed";  // e.g. a node that asked to join left again
    const std::string notice =
        restart ? restart_notice(*failure, own_.restarts, o_.max_restarts)
                : "cohort run: round " + std::to_string(ended_round) + " ended: " + why + "; round " +
                      std::to_string(own_.round) + " runs on " + plural(own_.nnodes, "node") + " with " +
                      plural(own_.world_size, "worker") + " (a membership change, not a restart)\n";
    send_starts(notice, failure);
    return RoundEnd{true, "", failure, notice};
  }

  Assignment next_round(SignalPipe&) override { return own_; }  // formed by decision()

  void abort(const std::string& summary) override { end_job(summary, std::nullopt); }

  void set_monitor_sink(MonitorSink sink) override { sink_ = std::move(sink); }

 private:
  // --- what the roster reports ---
  void on_message(RosterNode& n, const nlohmann::json& m) override {
    const std::string type = m.value("type", "");
    if (type == "monitor") {  // a worker's metrics or event, forwarded: to the hub, whatever the round
      if (sink_ && m.contains("m")) sink_(m["m"], m.value("node", n.node_rank));
      return;
    }
    if (!n.seated || round_of(m) != own_.round) return;  // spares have no say; late news of old rounds
    if (type == "done") n.done = true;
    if (type == "stopped") n.stopped = true;
    if (type == "fail" && !failure_event_ && !failure_) {
      failure_event_ = PeerEvent{PeerEvent::failed, m.value("summary", ""), failure_from(m)};
    }
    if (type == "abort" && !abort_) abort_ = m.value("summary", "");
  }

  // A node that finds the job full waits as a spare; otherwise it gets its place at the next round,
  // which its arrival brings about (handle()) unless the job is forming anyway.
  std::string on_joined(RosterNode&) override {
    return own_.world_size > 0 && seated_count() >= o_.max_nodes ? spare_note() : "";
  }

  void on_lost(const RosterNode& n, const std::string& why) override {
    if (n.seated && !n.done) {
      lost_.push_back("node " + std::to_string(n.node_rank) + " at " + n.label + " was lost (" + why + ")");
    }
  }

  // --- helpers ---
  std::string range() const { return std::to_string(o_.min_nodes) + ":" + std::to_string(o_.max_nodes); }
  int present() const { return 1 + static_cast<int>(roster_.nodes().size()); }
  int seated_count() const {
    int n = 1;
    for (const auto& node : roster_.nodes()) n += node.seated ? 1 : 0;
    return n;
  }
  std::string spare_note() const {
    return "cohort run: job '" + o_.rdzv_id + "' runs on its maximum of " + plural(o_.max_nodes, "node") +
           "; this node waits as a spare until one leaves\n";
  }

  // A spare can be given a place now: there is room, and no node has finished its part yet
  // (starting again then would make finished workers redo their tail from the checkpoint).
  bool spare_fits() const {
    if (done_ || seated_count() >= o_.max_nodes) return false;
    bool spare = false;
    for (const auto& n : roster_.nodes()) {
      if (n.seated && n.done) return false;
      spare = spare || !n.seated;
    }
    return spare;
  }

  std::string lost_text() const {
    std::string out;
    for (const auto& l : lost_) out += (out.empty() ? "" : "; ") + l;
    return out;
  }

  RoundEnd end_job(const std::string& summary, const std::optional<RoundFailure>& failure) {
    nlohmann::json end{{"type", "end"}, {"round", own_.round}, {"summary", summary}};
    if (failure) end["failure"] = failure_to_json(*failure);
    roster_.broadcast(end);
    ended_ = RoundEnd{false, summary, failure, ""};
    return *ended_;
  }

  void poll_and_service(SignalPipe& signals, int timeout_ms) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    roster_.add_pollfds(fds);
    poll(fds.data(), fds.size(), timeout_ms);
    signals.throw_if_interrupted();
    roster_.service(fds, *this);
  }

  // --- forming rounds ---
  // Until every seated node has stopped its workers (no worker of the next round may meet one of
  // this round at the store's port). A node that does not within --stop-timeout + --rdzv-timeout
  // is dropped, as if lost.
  void barrier(SignalPipe& signals) {
    const double limit_s = o_.stop_grace_s + o_.rdzv_timeout_s;
    const auto deadline = deadline_in(limit_s);
    for (;;) {
      bool waiting = false;
      for (const auto& n : roster_.nodes()) waiting = waiting || (n.seated && !n.stopped);
      if (!waiting || abort_) return;
      if (ms_left(deadline) == 0) {
        auto& nodes = roster_.nodes();
        for (size_t i = 0; i < nodes.size();) {
          if (nodes[i].seated && !nodes[i].stopped) {
            roster_.drop(i, "it did not stop its workers within " + cohort::detail::seconds_text(limit_s), *this);
          } else {
            ++i;
          }
        }
        return;
      }
      poll_and_service(signals, std::min(200, ms_left(deadline)));
    }
  }

  // Waits until the nodes present may form a round (membership.h's Gathering); false at the deadline.
  bool gather(SignalPipe& signals, std::chrono::steady_clock::time_point deadline) {
    Gathering gathering(o_.min_nodes, o_.max_nodes, o_.rdzv_settle_s);
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (gathering.ready(present(), now)) return true;
      if (ms_left(deadline) == 0) return false;
      int wait = std::min(200, ms_left(deadline));
      const int settle = gathering.ms_to_settle(now);
      if (settle >= 0) wait = std::min(wait, settle + 1);
      poll_and_service(signals, wait);
    }
  }

  // Gives the present nodes their places in round own_.round (membership.h); spares are told so.
  void seat_round() {
    std::vector<Candidate> candidates{{0, o_.nproc_per_node}};
    for (const auto& n : roster_.nodes()) candidates.push_back({n.id, n.nproc});
    const Seating seating = seat_nodes(candidates, o_.max_nodes);
    own_.world_size = seating.world_size;
    own_.nnodes = static_cast<int>(seating.seats.size());
    own_.node_rank = 0;
    own_.rank_base = 0;
    done_ = false;
    failure_.reset();
    failure_event_.reset();
    abort_.reset();
    lost_.clear();
    for (auto& n : roster_.nodes()) {
      n.seated = n.done = n.stopped = false;
      for (const Seat& s : seating.seats) {
        if (s.id != n.id) continue;
        n.seated = true;
        n.node_rank = s.node_rank;
        n.rank_base = s.rank_base;
      }
      if (!n.seated) n.link.channel->send({{"type", "wait"}, {"note", spare_note()}});
    }
  }

  // Tells every seated node its place, with the notice every node prints.
  void send_starts(const std::string& notice, const std::optional<RoundFailure>& failure) {
    for (auto& n : roster_.nodes()) {
      if (!n.seated) continue;
      nlohmann::json start{{"type", "start"},         {"round", own_.round},          {"restarts", own_.restarts},
                           {"world_size", own_.world_size}, {"rank_base", n.rank_base}, {"node_rank", n.node_rank},
                           {"nnodes", own_.nnodes},   {"master_addr", own_.master_addr},
                           {"master_port", own_.master_port}, {"notice", notice}};
      if (failure) start["failure"] = failure_to_json(*failure);
      n.link.channel->send(start);
    }
  }

  const RunOptions o_;
  const std::string where_;  // the endpoint, for messages
  Roster roster_;            // the other agents; the host itself is node id 0, always seated first
  Assignment own_;

  // The current round.
  bool done_ = false;                       // the host's own workers all succeeded
  std::optional<RoundFailure> failure_;     // the worker failure that ended it
  std::string failure_summary_;
  std::optional<PeerEvent> failure_event_;  // a member's "fail", until the round ends
  std::optional<std::string> abort_;        // a member ended the job (interrupted)
  std::vector<std::string> lost_;           // seated nodes lost before they were done
  std::optional<RoundEnd> ended_;           // the job is over
  MonitorSink sink_;                        // where forwarded worker messages go (the hub)
};

}  // namespace

RendezvousResult host_elastic_job(const RunOptions& o, int listener, SignalPipe& signals) {
  auto host = std::make_unique<ElasticHost>(o, listener);
  RendezvousResult result;
  result.assignment = host->form_first_round(signals);
  result.coordinator = std::move(host);
  return result;
}

}  // namespace cohort::launcher
