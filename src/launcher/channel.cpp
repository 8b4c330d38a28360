// JSON-lines messages over a TCP socket between agents. See channel.h.
#include "channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <iostream>

#include "message_check.h"
#include "socket_util.h"

namespace cohort::launcher {
namespace {

// Names a sender of something that is not an agent message: the first time, then at every power
// of ten, so that a flood of bad connections cannot fill the agent's stderr.
void note_dropped(int fd, const std::string& problem) {
  static std::atomic<uint64_t> dropped{0};
  const uint64_t n = ++dropped;
  for (uint64_t p = 1; p <= n; p *= 10) {
    if (p == n) {
      std::cerr << "cohort run: warning: dropped a connection from " << peer_address(fd) << ": " << problem
                << (n > 1 ? " (" + std::to_string(n) + " dropped so far)" : std::string()) << std::endl;
      return;
    }
  }
}

}  // namespace

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
    if (buffer_.size() > (1u << 24)) {  // 16 MiB without a newline: not an agent
      note_dropped(fd_, "16 MiB without a line end");
      return false;
    }
  }
  size_t start = 0, nl;
  while ((nl = buffer_.find('\n', start)) != std::string::npos) {
    auto message = nlohmann::json::parse(buffer_.begin() + static_cast<long>(start),
                                         buffer_.begin() + static_cast<long>(nl), nullptr, false);
    start = nl + 1;
    const std::string problem = message.is_discarded() ? "a line that is not JSON" : agent_message_problem(message);
    if (!problem.empty()) {  // not an agent: what it sent is never acted on
      note_dropped(fd_, problem);
      open = false;
      break;
    }
    out.push_back(std::move(message));
  }
  buffer_.erase(0, start);
  return open;
}

}  // namespace cohort::launcher
