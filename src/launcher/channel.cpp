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
  if (!unsent_.empty()) {  // whole lines only: what is queued goes first
    if (!write_all(fd_, unsent_)) return false;
    unsent_.clear();
  }
  return write_all(fd_, line);
}

bool Channel::send_droppable(const nlohmann::json& message, size_t limit) {
  std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  // Another thread (an elastic job's heartbeats) may be waiting on a full socket: never wait for it.
  std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    ++dropped_;
    return false;
  }
  if (!flush_locked()) return false;
  if (unsent_.size() + line.size() > limit) {
    ++dropped_;
    return false;
  }
  unsent_ += line;
  return flush_locked();
}

bool Channel::flush() {
  std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
  return !lock.owns_lock() || flush_locked();  // busy: the other sender flushes the queue first
}

bool Channel::flush_locked() {
  while (!unsent_.empty()) {
    const ssize_t n = ::send(fd_, unsent_.data(), unsent_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      unsent_.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;  // the rest later
    } else {
      return false;
    }
  }
  return true;
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
