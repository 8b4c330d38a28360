// A member of an elastic job: joins the host at the endpoint, follows its rounds, and stops for good
// when the host is lost (the job cannot outlive it). See elastic/coordinators.h for the protocol.
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "cohort/error.h"
#include "launcher/elastic/coordinators.h"
#include "launcher/config/elastic_options.h"
#include "launcher/elastic/heartbeat.h"
#include "launcher/io/waiting.h"
#include "launcher/protocol.h"
#include "runtime/duration_text.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {
namespace {

class ElasticMember : public Coordinator {
 public:
  explicit ElasticMember(const RunOptions& o) : o_(o), where_(o.rdzv_endpoint), beats_(o.node_timeout_s / 5) {}

  Assignment join(SignalPipe& signals) {
    const Endpoint endpoint = parse_endpoint(o_.rdzv_endpoint);
    const auto deadline = deadline_in(o_.rdzv_timeout_s);
    int fd = -1, err = 0;
    for (;;) {
      // The host may start later than we do: keep trying until --rdzv-timeout.
      fd = connect_tcp(endpoint.host, endpoint.port, std::max(1, std::min(ms_left(deadline), 1000)), &err);
      if (fd >= 0) break;
      if (ms_left(deadline) == 0) {
        throw TimeoutError(-1, "could not reach the rendezvous host at " + where_ + " within " +
                                   cohort::detail::seconds_text(o_.rdzv_timeout_s) + " (" + std::strerror(err) +
                                   "); start cohort run there with the same --rdzv-endpoint, or raise --rdzv-timeout");
      }
      pollfd p{signals.fd(), POLLIN, 0};
      poll(&p, 1, std::min(ms_left(deadline), 200));
      signals.throw_if_interrupted();
    }
    link_.emplace(std::make_shared<Channel>(fd, o_.job_token));
    beats_.add(link_->channel);
    link_->channel->send({{"type", "join"},
                          {"rdzv_id", o_.rdzv_id},
                          {"min", o_.min_nodes},
                          {"max", o_.max_nodes},
                          {"nproc", o_.nproc_per_node},
                          {"pid", static_cast<int64_t>(getpid())}});
    // The host answers a join at once ("wait" or "reject"); after that, waiting for a place has no
    // limit of ours: the host bounds the rendezvous, and heartbeats tell us if it is gone.
    const auto answer_deadline = deadline_in(o_.rdzv_timeout_s);
    for (;;) {
      poll_and_service(signals, 200);
      if (rejected_) {
        if (rejected_timeout_) throw TimeoutError(-1, *rejected_);
        throw ConfigError(-1, *rejected_);
      }
      if (end_) throw JobStopped(end_->summary);
      if (finished_) {
        throw JobFinished("cohort run: job '" + o_.rdzv_id + "' finished before this node got a place in it\n");
      }
      if (next_) {
        if (!next_notice_.empty()) std::cerr << next_notice_ << std::flush;  // what the others print too
        own_ = *next_;
        next_.reset();
        return own_;
      }
      if (host_lost_) {
        throw CommError(-1, "lost contact with the rendezvous host at " + where_ + " (" + *host_lost_ +
                                ") while waiting to join job '" + o_.rdzv_id + "'");
      }
      if (!answered_ && ms_left(answer_deadline) == 0) {
        throw TimeoutError(-1, "reached " + where_ + " but no cohort run rendezvous answered within " +
                                   cohort::detail::seconds_text(o_.rdzv_timeout_s) + "; is the job's host listening there?");
      }
    }
  }

  // --- while a round runs ---
  void add_pollfds(std::vector<pollfd>& fds) const override {
    if (link_) fds.push_back({link_->fd(), POLLIN, 0});
  }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    service(fds);
    if (finished_) return std::nullopt;  // job_done() says it
    if (end_) return PeerEvent{end_->failure ? PeerEvent::failed : PeerEvent::stopped, end_->summary, end_->failure};
    if (host_lost_) return PeerEvent{PeerEvent::lost, host_lost_text(), std::nullopt};
    if (stop_requested_) return PeerEvent{PeerEvent::stopped, "", std::nullopt};
    return std::nullopt;
  }

  void local_done() override { send({{"type", "done"}, {"round", own_.round}}); }

  bool job_done() override { return finished_; }

  // --- between rounds ---
  void round_over(const Outcome& outcome) override {
    if (end_ || host_lost_) return;
    if (outcome.kind == Outcome::worker_failed) {
      nlohmann::json fail{{"type", "fail"}, {"round", own_.round}, {"summary", outcome.summary}};
      if (outcome.failure) fail["failure"] = failure_to_json(*outcome.failure);
      send(fail);  // the host decides once every node stopped; decision() waits for it
    } else if (outcome.kind == Outcome::interrupted) {
      abort(outcome.summary);
      end_ = RoundEnd{false, outcome.summary, std::nullopt, ""};
    }
  }

  RoundEnd decision(SignalPipe& signals) override {
    if (!end_ && !host_lost_) send({{"type", "stopped"}, {"round", own_.round}});
    // No limit of our own: the host bounds its barrier, and heartbeats tell us if it is gone.
    for (;;) {
      if (end_) return *end_;
      if (host_lost_) return RoundEnd{false, host_lost_text(), std::nullopt, ""};
      if (next_) return RoundEnd{true, "", next_failure_, next_notice_};
      poll_and_service(signals, 200);
    }
  }

  Assignment next_round(SignalPipe&) override {
    own_ = *next_;
    next_.reset();
    stop_requested_ = false;
    return own_;
  }

  void abort(const std::string& summary) override {
    send({{"type", "abort"}, {"round", own_.round}, {"summary", summary}});
  }

  void forward_monitor(const nlohmann::json& message, int node) override {
    if (link_ && !host_lost_) link_->channel->send_droppable({{"type", "monitor"}, {"node", node}, {"m", message}});
  }

 private:
  void send(const nlohmann::json& message) {
    if (link_) link_->channel->send(message);
  }

  void poll_and_service(SignalPipe& signals, int timeout_ms) {
    std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
    add_pollfds(fds);
    poll(fds.data(), fds.size(), timeout_ms);
    signals.throw_if_interrupted();
    service(fds);
  }

  // What the host sent, and whether it is still there.
  void service(const std::vector<pollfd>& fds) {
    if (!link_ || host_lost_) return;
    link_->channel->flush();  // forwarded metrics still queued (forward_monitor)
    std::vector<nlohmann::json> messages;
    const bool open = !is_ready(fds, link_->fd()) || link_->receive(messages);
    for (const auto& m : messages) {
      const std::string type = m.value("type", "");
      if (type == "reject") {
        rejected_ = m.value("reason", "");
        rejected_timeout_ = m.value("timeout", false);
      } else if (type == "wait") {
        answered_ = true;
        const std::string note = m.value("note", "");
        if (!note.empty() && note != last_note_) std::cerr << note << std::flush;
        last_note_ = note;
      } else if (type == "start" && (!started_ || round_of(m) == own_.round + 1)) {
        started_ = answered_ = true;
        Assignment a;
        a.round = round_of(m);
        a.restarts = m.value("restarts", 0);
        a.world_size = m.value("world_size", 0);
        a.rank_base = m.value("rank_base", 0);
        a.node_rank = m.value("node_rank", 0);
        a.nnodes = m.value("nnodes", 1);
        a.master_addr = m.value("master_addr", "");
        a.master_port = m.value("master_port", 0);
        next_ = a;
        next_notice_ = m.value("notice", "");
        next_failure_ = failure_from(m);
      } else if (type == "stop" && round_of(m) == own_.round) {
        stop_requested_ = true;
      } else if (type == "end" && !end_) {
        end_ = RoundEnd{false, m.value("summary", ""), failure_from(m), ""};  // final, whatever came before
      } else if (type == "finish") {
        finished_ = true;
      }
    }
    if (finished_ || end_ || rejected_) return;  // the host may close the connection now
    if (!open) {
      const std::string refusal = link_->channel->refusal();
      host_lost_ = refusal.empty() ? "its connection closed" : "it refused this node's messages: " + refusal;
    } else if (answered_ && link_->silent_for(o_.node_timeout_s)) {
      // Only once answered: the host beats to a node from its admission on, but a join that
      // arrives while it stops its workers waits that long for the answer (join()'s deadline).
      host_lost_ = "no message for " + cohort::detail::seconds_text(o_.node_timeout_s);
    }
    if (host_lost_) beats_.remove(link_->channel.get());
  }

  std::string host_lost_text() const {
    return "cohort run: job stopped: lost contact with the rendezvous host at " + where_ + " (" + *host_lost_ +
           "); an elastic job cannot go on without the node that hosts its rendezvous. If that node is gone, "
           "start the job again with --rdzv-endpoint at a surviving node (the workers resume from the latest "
           "checkpoint); if only this node was cut off, start cohort run here again to rejoin\n";
  }

  const RunOptions o_;
  const std::string where_;
  HeartbeatSender beats_;
  std::optional<Link> link_;
  Assignment own_;
  bool answered_ = false, started_ = false;
  std::string last_note_;
  std::optional<std::string> rejected_;
  bool rejected_timeout_ = false;
  std::optional<Assignment> next_;  // the host's "start" for the next round
  std::string next_notice_;
  std::optional<RoundFailure> next_failure_;
  bool stop_requested_ = false;
  std::optional<RoundEnd> end_;           // the job is over (the host said so, or we were interrupted)
  std::optional<std::string> host_lost_;  // why we count the host as gone
  bool finished_ = false;
};

}  // namespace

RendezvousResult join_elastic_job(const RunOptions& o, SignalPipe& signals) {
  auto member = std::make_unique<ElasticMember>(o);
  RendezvousResult result;
  result.assignment = member->join(signals);
  result.coordinator = std::move(member);
  return result;
}

}  // namespace cohort::launcher
