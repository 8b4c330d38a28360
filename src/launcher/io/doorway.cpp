// The connections a rendezvous host accepted that have not joined yet. See doorway.h.
#include "launcher/io/doorway.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <iostream>

#include "launcher/io/socket_util.h"
#include "launcher/io/waiting.h"

namespace cohort::launcher {
namespace {

constexpr int kAcceptsPerCall = 64;  // a flood is taken in batches: the host's loop has other work

// Running out of descriptors is worth a line (a real node may be kept out meanwhile): the first
// time, then at every power of ten, so that a flood cannot fill stderr.
void note_out_of_descriptors(int err) {
  static std::atomic<uint64_t> times{0};
  const uint64_t n = ++times;
  for (uint64_t p = 1; p <= n; p *= 10) {
    if (p != n) continue;
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    std::cerr << "cohort run: warning: cannot accept a connection: "
              << (err == EMFILE ? "out of file descriptors (ulimit -n " + std::to_string(limit.rlim_cur) + ")"
                                : std::string("the system is out of file descriptors or memory"))
              << "; waiting for some to close" << (n > 1 ? " (" + std::to_string(n) + " times so far)" : "")
              << std::endl;
    return;
  }
}

}  // namespace

Doorway::Doorway(int listener, std::string token) : listener_(listener), token_(std::move(token)) {
  set_nonblocking(listener_);  // accept_some() takes connections until none is left
}

void Doorway::add_pollfds(std::vector<pollfd>& fds) const {
  if (std::chrono::steady_clock::now() >= quiet_until_) fds.push_back({listener_, POLLIN, 0});
  for (const auto& w : waiting_) fds.push_back({w.channel->fd(), POLLIN, 0});
}

void Doorway::drop_oldest(const std::string& why) {
  waiting_.front().channel->refuse(why);
  waiting_.erase(waiting_.begin());  // closes it
}

void Doorway::accept_some() {
  for (int i = 0; i < kAcceptsPerCall; ++i) {
    const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      if (waiting_.size() >= kMaxWaiting) {
        drop_oldest("more than " + std::to_string(kMaxWaiting) + " connections waited to join at once");
      }
      auto channel = std::make_unique<Channel>(fd, token_);
      channel->set_buffer_limit(kJoinBytes);
      waiting_.push_back({std::move(channel), std::chrono::steady_clock::now()});
      continue;
    }
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return;
    if ((err == EMFILE || err == ENFILE) && !waiting_.empty()) {
      // Make room: a real node's join comes within milliseconds of its connect, so the oldest
      // waiting connection is the one least likely to be one.
      drop_oldest("this host ran out of file descriptors");
      continue;
    }
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) note_out_of_descriptors(err);
    // The listener stays readable while accept() fails: leave it alone for a while.
    quiet_until_ = std::chrono::steady_clock::now() + kBackOff;
    return;
  }
}

std::vector<Doorway::Arrival> Doorway::service(const std::vector<pollfd>& fds) {
  if (is_ready(fds, listener_)) accept_some();
  std::vector<Arrival> arrivals;
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < waiting_.size();) {
    Waiting& w = waiting_[i];
    std::vector<nlohmann::json> messages;
    // Read before judging the time: a join that came while the host was busy still counts.
    const bool open = !is_ready(fds, w.channel->fd()) || w.channel->receive(messages);
    bool settled = !open;
    for (auto& m : messages) {
      if (m.value("type", "") != "join") continue;
      w.channel->set_buffer_limit(Channel::kBufferLimit);
      arrivals.push_back({std::move(w.channel), std::move(m)});
      settled = true;
      break;
    }
    if (!settled && now - w.since > kJoinWindow) {
      w.channel->refuse("it did not join within " + std::to_string(kJoinWindow.count() / 1000) + " s of connecting");
      settled = true;
    }
    if (settled) {
      waiting_.erase(waiting_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
  return arrivals;
}

}  // namespace cohort::launcher
