// JSON-lines messages over a TCP socket between agents. See channel.h.
#include "channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "socket_util.h"

namespace cohort::launcher {

Channel::Channel(int fd) : fd_(fd) { set_nonblocking(fd_); }

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

bool Channel::send(const nlohmann::json& message) {
  const std::string line = message.dump() + "\n";
  std::lock_guard<std::mutex> lock(send_mu_);
  return write_all(fd_, line);
}

bool Channel::receive(std::vector<nlohmann::json>& out) {
  char buf[16384];
  bool open = true;
  for (;;) {
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      break;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    if (buffer_.size() > (1u << 24)) return false;  // 16 MiB without a newline: not an agent
  }
  size_t start = 0, nl;
  while ((nl = buffer_.find('\n', start)) != std::string::npos) {
    auto message = nlohmann::json::parse(buffer_.begin() + static_cast<long>(start),
                                         buffer_.begin() + static_cast<long>(nl), nullptr, false);
    start = nl + 1;
    if (message.is_discarded() || !message.is_object() || !message.contains("type")) {
      open = false;
      break;
    }
    out.push_back(std::move(message));
  }
  buffer_.erase(0, start);
  return open;
}

}  // namespace cohort::launcher
