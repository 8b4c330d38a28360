// An httplib::Stream over one accepted connection. See connection_stream.h.
#include "dashboard/connection_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cohort::dashboard {
namespace {

using Clock = std::chrono::steady_clock;

/// poll() for `events` on fd for at most `wait`; true when they came.
bool wait_for(int fd, short events, std::chrono::milliseconds wait) {
  pollfd p{fd, events, 0};
  const auto until = Clock::now() + wait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

void ip_and_port(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
    port = ntohs(a.sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof(text));
    port = ntohs(a.sin6_port);
  }
  ip = text;
}

}  // namespace

bool ConnectionStream::is_readable() const {
  if (consumed_ < buffered_) return true;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(read_deadline_ - Clock::now());
  return left.count() > 0 && wait_for(fd_, POLLIN, left);
}

bool ConnectionStream::is_writable() const {
  if (!wait_for(fd_, POLLOUT, write_timeout_)) return false;
  // Writable, but is the peer still there? Readable with nothing to read means it closed.
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  char byte;
  return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (consumed_ == buffered_) {
    if (!is_readable()) return -1;
    ssize_t n;
    do {
      n = ::recv(fd_, buffer_, sizeof(buffer_), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    buffered_ = static_cast<size_t>(n);
    consumed_ = 0;
  }
  const size_t take = std::min(size, buffered_ - consumed_);
  std::memcpy(ptr, buffer_ + consumed_, take);
  consumed_ += take;
  return static_cast<ssize_t>(take);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!wait_for(fd_, POLLOUT, write_timeout_)) return -1;
  ssize_t n;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
}

}  // namespace cohort::dashboard
