// Shared pieces of the agents' protocol. See static/protocol.h.
#include "launcher/static/protocol.h"

#include "launcher/io/signal_pipe.h"

namespace cohort::launcher {

nlohmann::json failure_to_json(const RoundFailure& f) {
  return {{"round", f.round()}, {"rank", f.who.rank}, {"node_rank", f.who.node_rank}, {"local_rank", f.who.local_rank},
          {"pid", f.who.pid},   {"how", f.how},       {"time_ms", f.time_ms},           {"summary", f.summary}};
}

std::optional<RoundFailure> failure_from(const nlohmann::json& message) {
  auto it = message.find("failure");
  if (it == message.end() || !it->is_object()) return std::nullopt;
  RoundFailure f;
  f.who.restart_count = it->value("round", 0);
  f.who.rank = it->value("rank", 0);
  f.who.node_rank = it->value("node_rank", 0);
  f.who.local_rank = it->value("local_rank", 0);
  f.who.pid = it->value("pid", int64_t{0});
  f.how = it->value("how", "");
  f.time_ms = it->value("time_ms", int64_t{0});
  f.summary = it->value("summary", "");
  return f;
}

bool is_ready(const std::vector<pollfd>& fds, int fd) {
  for (const auto& p : fds) {
    if (p.fd == fd && (p.revents & (POLLIN | POLLHUP | POLLERR))) return true;
  }
  return false;
}

std::vector<pollfd> wait_for_channels(const std::vector<Channel*>& channels, SignalPipe& signals, int timeout_ms) {
  std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
  for (const Channel* c : channels) {
    if (c) fds.push_back({c->fd(), POLLIN, 0});
  }
  poll(fds.data(), fds.size(), timeout_ms);
  signals.throw_if_interrupted();
  return fds;
}

int ms_left(std::chrono::steady_clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::max<int64_t>(left, 0));
}

std::chrono::steady_clock::time_point deadline_in(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace cohort::launcher
