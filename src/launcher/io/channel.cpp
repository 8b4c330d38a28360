// JSON-lines messages over a TCP socket between agents, authenticated with the job token. See channel.h.
#include "launcher/io/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <string_view>

#include "launcher/io/message_check.h"
#include "runtime/net/message_auth.h"
#include "runtime/json_fields.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {
namespace {

constexpr std::string_view kHello = "cohort-hello-1 ";     // + 32 hex digits
constexpr std::string_view kRefused = "cohort-refused ";   // + why, plain text
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacDigits = 64;
constexpr int kHelloWaitMs = 10000;
constexpr size_t kHelloLimit = 4096;  // bytes before the hello's line end

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

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The peer's nonce from its hello line; empty when the line is not one.
std::string nonce_of_hello(std::string_view line) {
  if (line.substr(0, kHello.size()) != kHello) return "";
  const std::string_view nonce = line.substr(kHello.size());
  return nonce.size() == 2 * kNonceBytes && is_hex(nonce) ? std::string(nonce) : "";
}

// What a message's MAC binds it to besides its JSON: who sent it to whom on this connection, and
// its number there.
std::string context(const std::string& from_nonce, const std::string& to_nonce, uint64_t n) {
  return "cohort-message-1 " + from_nonce + " " + to_nonce + " " + std::to_string(n) + "\n";
}

// A peer's refusal reason, for quoting in an error: printable ASCII only, at most 300 characters.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 300)) out += (c >= 32 && c < 127) ? c : '?';
  return out;
}

}  // namespace

Channel::Channel(int fd, const std::string& token) : fd_(fd) {
  if (token.empty()) {
    close(fd_);
    throw std::invalid_argument("cohort run: internal error: a channel without the job token");
  }
  key_ = detail::derive_key(token, "agent messages");
  own_nonce_ = detail::random_hex(kNonceBytes);
  set_nonblocking(fd_);
  write_all(fd_, std::string(kHello) + own_nonce_ + "\n");  // a failure shows at the first send or receive
}

Channel::~Channel() {
  if (fd_ >= 0) close(fd_);
}

std::string Channel::refusal() const {
  std::lock_guard<std::mutex> lock(read_mu_);
  return refusal_;
}

void Channel::set_buffer_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(read_mu_);
  buffer_limit_ = bytes;
}

bool Channel::take_hello_locked() {
  if (!peer_nonce_.empty()) return true;
  const size_t nl = buffer_.find('\n');
  if (nl == std::string::npos) return false;
  peer_nonce_ = nonce_of_hello(std::string_view(buffer_).substr(0, nl));
  if (peer_nonce_.empty()) return false;  // not a hello: receive() refuses the peer
  buffer_.erase(0, nl + 1);
  return true;
}

bool Channel::learn_peer_nonce(int wait_ms) {
  std::lock_guard<std::mutex> lock(read_mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  char buf[4096];
  for (;;) {
    if (take_hello_locked()) return true;
    if (buffer_.find('\n') != std::string::npos || buffer_.size() > kHelloLimit) return false;  // a first line that is not a hello
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;  // gone
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, static_cast<int>(left.count()));
  }
}

std::string Channel::sealed(const std::string& text) {
  std::string peer;
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    peer = peer_nonce_;
  }
  return detail::sealed_text(key_, context(own_nonce_, peer, sent_++), text) + "\n";
}

bool Channel::send(const nlohmann::json& message) {
  std::lock_guard<std::mutex> lock(send_mu_);
  if (!learn_peer_nonce(kHelloWaitMs)) return false;  // no hello: not a peer we can talk to
  const std::string line = sealed(detail::dump_text(message));  // a summary quotes worker output: any bytes
  if (!unsent_.empty()) {  // whole lines only: what is queued goes first
    if (!write_all(fd_, unsent_)) return false;
    unsent_.clear();
  }
  return write_all(fd_, line);
}

bool Channel::send_droppable(const nlohmann::json& message, size_t limit) {
  // Another thread (an elastic job's heartbeats) may be waiting on a full socket: never wait for it.
  std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
  if (!lock.owns_lock() || !learn_peer_nonce(0)) {
    ++dropped_;
    return false;
  }
  if (!flush_locked()) return false;
  const std::string text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (unsent_.size() + text.size() + kMacDigits + 2 > limit) {  // before sealing: a dropped message takes no number
    ++dropped_;
    return false;
  }
  unsent_ += sealed(text);
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

void Channel::refuse(const std::string& why) {
  note_dropped(fd_, why);
  // One try, never waiting: a peer that does not read must not hold this agent.
  const std::string line = std::string(kRefused) + why + "\n";
  (void)::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool Channel::receive(std::vector<nlohmann::json>& out) {
  std::lock_guard<std::mutex> lock(read_mu_);
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
    // An agent's hello is its first 48 bytes: a stranger may not make this side hold more than
    // a few KiB before it (the bound is per connection; a host bounds the connections, doorway.h).
    if (peer_nonce_.empty() && buffer_.size() > kHelloLimit && buffer_.find('\n') > kHelloLimit) {
      refuse("4 KiB without a hello (not a cohort agent)");
      return false;
    }
    if (buffer_.size() > buffer_limit_) {
      refuse(buffer_limit_ >= (size_t{1} << 20) ? std::to_string(buffer_limit_ >> 20) + " MiB without a line end"
                                                : std::to_string(buffer_limit_ >> 10) + " KiB without a line end");
      return false;
    }
  }
  size_t start = 0, nl;
  while ((nl = buffer_.find('\n', start)) != std::string::npos) {
    const std::string_view line = std::string_view(buffer_).substr(start, nl - start);
    start = nl + 1;
    if (line.substr(0, kRefused.size()) == kRefused) {  // the peer's last word
      refusal_ = printable(line.substr(kRefused.size()));
      open = false;
      break;
    }
    if (peer_nonce_.empty()) {
      peer_nonce_ = nonce_of_hello(line);
      if (peer_nonce_.empty()) {
        refuse("it did not begin with a cohort agent's hello (not cohort run, or another version of it)");
        open = false;
        break;
      }
      continue;
    }
    const auto text = detail::opened_text(key_, context(peer_nonce_, own_nonce_, received_), line);
    if (!text) {
      refuse("a message that fails authentication (not from an agent of this job: every node needs the same job "
             "token, --job-token-file or COHORT_JOB_TOKEN)");
      open = false;
      break;
    }
    ++received_;
    std::string why;
    auto message = detail::parse_capped_or_discarded(text->begin(), text->end(), &why);
    const std::string problem = message.is_discarded() ? "a line that is " + why : agent_message_problem(message);
    if (!problem.empty()) {  // authentic but not a message of this protocol: never acted on
      refuse(problem);
      open = false;
      break;
    }
    out.push_back(std::move(message));
  }
  buffer_.erase(0, start);
  return open;
}

}  // namespace cohort::launcher
