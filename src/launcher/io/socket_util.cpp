// TCP helpers for the agents' coordination channel. See socket_util.h.
#include "launcher/io/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::launcher {
namespace {

sockaddr_in make_addr(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, resolve_ipv4(host).c_str(), &addr.sin_addr);
  return addr;
}

}  // namespace

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

std::string resolve_ipv4(const std::string& host) {
  in_addr probe{};
  if (inet_pton(AF_INET, host.c_str(), &probe) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw ConfigError(-1, "cannot resolve master address '" + host + "' (" + gai_strerror(rc) + ")");
  }
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return buf;
}

int bind_tcp(const std::string& host, int port) {
  sockaddr_in addr = make_addr(host, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw ConfigError(-1, std::string("socket() failed: ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    int err = errno;
    close(fd);
    std::string where = host + ":" + std::to_string(port);
    if (err == EADDRNOTAVAIL) {
      throw ConfigError(-1, "cannot listen on " + where + ": " + host +
                                " is not an address of this machine (node 0 must own --master-addr)");
    }
    throw ConfigError(-1, "cannot listen on " + where + " (" + std::strerror(err) +
                              "); choose another --master-port");
  }
  return fd;
}

int try_listen_tcp(const std::string& host, int port, int* error) {
  sockaddr_in addr = make_addr(host, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    *error = errno;
    close(fd);
    return -1;
  }
  return fd;
}

int connect_tcp(const std::string& host, int port, int timeout_ms, int* error) {
  sockaddr_in addr = make_addr(host, port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw ConfigError(-1, std::string("socket() failed: ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int err = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) == 1) {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      } else {
        err = ETIMEDOUT;
      }
    }
  }
  if (err != 0) {
    close(fd);
    *error = err;
    return -1;
  }
  return fd;
}

std::string peer_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) return "?";
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
  return buf;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 1000);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace cohort::launcher
