// launcher/io/socket_util.h — the few TCP calls the agents need, IPv4, every descriptor close-on-exec
// so that workers never inherit them. Listening sockets bind to one given address, never to all.
#pragma once

#include <string>

namespace cohort::launcher {

/// Owns a descriptor and closes it.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd();
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

/// Resolves `host` (a dotted address or a name) to a dotted IPv4 address; throws ConfigError.
std::string resolve_ipv4(const std::string& host);

/// A socket bound to host:port (port 0: any free one) and listening. Throws ConfigError naming the
/// address when it is not one of this machine's or the port is taken.
int bind_tcp(const std::string& host, int port);

/// Like bind_tcp, but reports failure as -1 with *error set to the errno (EADDRNOTAVAIL: not an
/// address of this machine; EADDRINUSE: the port is taken) instead of throwing.
int try_listen_tcp(const std::string& host, int port, int* error);

/// Connects to host:port, waiting at most timeout_ms. Returns a non-blocking socket, or -1 with
/// *error set to the errno (ECONNREFUSED, ETIMEDOUT, ...). Throws ConfigError for a bad address.
int connect_tcp(const std::string& host, int port, int timeout_ms, int* error);

void set_nonblocking(int fd);

/// The dotted address of a connected socket's peer ("?" when it has none).
std::string peer_address(int fd);

/// Writes all of `data` to a (possibly non-blocking) descriptor, waiting while it is full.
/// Returns false when the peer is gone.
bool write_all(int fd, const std::string& data);

}  // namespace cohort::launcher
