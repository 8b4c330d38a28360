// Waiting with a deadline. See waiting.h.
#include "launcher/io/waiting.h"

#include <algorithm>

#include "launcher/io/signal_pipe.h"

namespace cohort::launcher {

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
