// Node 0's and the other nodes' coordinators. See peer_coordinators.h for the protocol.
#include "peer_coordinators.h"

#include <unistd.h>

namespace cohort::launcher {
namespace {

bool ready(const std::vector<pollfd>& fds, int fd) {
  for (const auto& p : fds) {
    if (p.fd == fd && (p.revents & (POLLIN | POLLHUP | POLLERR))) return true;
  }
  return false;
}

class HostCoordinator : public Coordinator {
 public:
  explicit HostCoordinator(std::vector<PeerLink> members) {
    for (auto& m : members) members_.push_back({std::move(m), false});
  }

  void add_pollfds(std::vector<pollfd>& fds) const override {
    for (const auto& m : members_) {
      if (m.link.channel) fds.push_back({m.link.channel->fd(), POLLIN, 0});
    }
  }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    for (auto& m : members_) {
      if (!m.link.channel || !ready(fds, m.link.channel->fd())) continue;
      std::vector<nlohmann::json> messages;
      bool open = m.link.channel->receive(messages);
      for (const auto& msg : messages) {
        const std::string type = msg.value("type", "");
        if (type == "done") m.done = true;
        if (type == "fail") return PeerEvent{PeerEvent::failed, msg.value("summary", "")};
      }
      if (!open) {
        m.link.channel.reset();
        if (!m.done) {
          return PeerEvent{PeerEvent::lost, "cohort run: job failed: lost contact with node " +
                                                std::to_string(m.link.node_rank) +
                                                "'s cohort run (it exited or became unreachable)\n"};
        }
      }
    }
    return std::nullopt;
  }

  void local_done() override { done_ = true; }

  void abort(const std::string& summary) override {
    for (auto& m : members_) {
      if (m.link.channel) m.link.channel->send({{"type", "stop"}, {"summary", summary}});
    }
  }

  bool job_done() override {
    if (!done_) return false;
    for (const auto& m : members_) {
      if (!m.done) return false;
    }
    for (auto& m : members_) {
      if (m.link.channel) m.link.channel->send({{"type", "finish"}});
    }
    return true;
  }

 private:
  struct Member {
    PeerLink link;
    bool done;
  };
  std::vector<Member> members_;
  bool done_ = false;
};

class MemberCoordinator : public Coordinator {
 public:
  MemberCoordinator(std::unique_ptr<Channel> host, std::string where)
      : host_(std::move(host)), where_(std::move(where)) {}

  void add_pollfds(std::vector<pollfd>& fds) const override {
    if (host_) fds.push_back({host_->fd(), POLLIN, 0});
  }

  std::optional<PeerEvent> handle(const std::vector<pollfd>& fds) override {
    if (!host_ || !ready(fds, host_->fd())) return std::nullopt;
    std::vector<nlohmann::json> messages;
    bool open = host_->receive(messages);
    for (const auto& msg : messages) {
      const std::string type = msg.value("type", "");
      if (type == "finish") finished_ = true;
      if (type == "stop") return PeerEvent{PeerEvent::failed, msg.value("summary", "")};
    }
    if (!open) {
      host_.reset();
      if (!finished_) {
        return PeerEvent{PeerEvent::lost, "cohort run: job failed: lost contact with node 0's cohort run at " +
                                              where_ + " (it exited or became unreachable)\n"};
      }
    }
    return std::nullopt;
  }

  void local_done() override {
    if (host_) host_->send({{"type", "done"}});
  }

  void abort(const std::string& summary) override {
    if (host_) host_->send({{"type", "fail"}, {"summary", summary}});
  }

  bool job_done() override { return finished_; }

 private:
  std::unique_ptr<Channel> host_;
  std::string where_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Coordinator> make_host_coordinator(std::vector<PeerLink> members) {
  return std::make_unique<HostCoordinator>(std::move(members));
}

std::unique_ptr<Coordinator> make_member_coordinator(std::unique_ptr<Channel> host, const std::string& where) {
  return std::make_unique<MemberCoordinator>(std::move(host), where);
}

}  // namespace cohort::launcher
