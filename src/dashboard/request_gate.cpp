// Connections wait for their request headers in one epoll set. See request_gate.h.
#include "dashboard/request_gate.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <algorithm>
#include <string_view>
#include <system_error>

namespace cohort::dashboard {
namespace {

using Clock = std::chrono::steady_clock;

// Larger than any request the dashboard answers (a GET with a token and a browser's headers, a few
// KiB) and than httplib's own limits per line (8 KiB): headers that do not end within it are refused.
constexpr size_t kMaxHeaderBytes = 16 * 1024;

bool headers_complete(std::string_view seen) {
  return seen.find("\r\n\r\n") != std::string_view::npos || seen.find("\n\n") != std::string_view::npos;
}

void refuse_too_large(int fd) {
  static const char kReply[] =
      "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  (void)!::send(fd, kReply, sizeof(kReply) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

RequestGate::RequestGate(std::function<void(int)> serve, RequestGateOptions options)
    : serve_(std::move(serve)), options_(options), threads_(options.max_threads) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const int err = errno;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::system_error(err, std::generic_category(), "dashboard: epoll for waiting connections");
  }
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  watcher_ = std::thread([this] { watch(); });
}

RequestGate::~RequestGate() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void RequestGate::park(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) {
    ::close(fd);
    return;
  }
  close_expired();
  while (parked_.size() >= options_.max_parked && !arrivals_.empty()) close_oldest();  // make room
  const unsigned long long seq = ++next_seq_;
  parked_[fd] = seq;
  arrivals_.push_back({Clock::now() + options_.deadline, seq, fd});
  epoll_event ev{};
  // Edge-triggered: a peek leaves the bytes in the socket, so a level-triggered set would report
  // a partial request again and again; an edge comes with each new segment.
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    parked_.erase(fd);
    ::close(fd);
  }
}

void RequestGate::unpark(int fd) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  parked_.erase(fd);
}

void RequestGate::close_oldest() {
  const Arrival a = arrivals_.front();
  arrivals_.pop_front();
  auto it = parked_.find(a.fd);
  if (it != parked_.end() && it->second == a.seq) {  // still waiting (not served since)
    unpark(a.fd);
    ::close(a.fd);
  }
}

void RequestGate::close_expired() {
  const auto now = Clock::now();
  while (!arrivals_.empty() && arrivals_.front().deadline <= now) close_oldest();
}

void RequestGate::examine(int fd) {
  static thread_local char seen[kMaxHeaderBytes];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (parked_.count(fd) == 0) return;  // served or closed since the event was queued
    const ssize_t n = ::recv(fd, seen, sizeof(seen), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;  // nothing new
    const bool complete = n > 0 && headers_complete(std::string_view(seen, static_cast<size_t>(n)));
    if (!complete) {
      // The peer closed (0), failed (< 0), or sent more than any request of ours: done with it.
      // Otherwise the request is still arriving, or only its sender's half is shut: wait on.
      if (n > 0 && static_cast<size_t>(n) < sizeof(seen)) return;
      if (n == static_cast<ssize_t>(sizeof(seen))) refuse_too_large(fd);
      unpark(fd);
      ::close(fd);
      return;
    }
    unpark(fd);
  }
  // Outside the lock: with no thread to be had, enqueue serves on this thread.
  threads_.enqueue([this, fd] { serve_(fd); });
}

void RequestGate::watch() {
  epoll_event events[64];
  for (;;) {
    int timeout_ms = 1000;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      close_expired();
      if (!arrivals_.empty()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(arrivals_.front().deadline - Clock::now());
        timeout_ms = static_cast<int>(std::max<long long>(0, std::min<long long>(timeout_ms, left.count())));
      }
    }
    const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_fd_) continue;  // stop(): seen at the top of the loop
      examine(events[i].data.fd);
    }
  }
}

void RequestGate::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (watcher_.joinable()) watcher_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [fd, seq] : parked_) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
    }
    parked_.clear();
    arrivals_.clear();
  }
  threads_.shutdown();
}

}  // namespace cohort::dashboard
