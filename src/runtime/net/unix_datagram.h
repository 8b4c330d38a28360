// runtime/net/unix_datagram.h — one datagram off a Unix socket, with its sender's path and room for
// control messages (credentials, descriptors): the receiving side that the worker's link to its
// agent (runtime/agent_link/agent_link.h) and the agent's worker link (launcher/workers/worker_link.h)
// share. No torch; header only.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>
#include <string>

namespace cohort::detail {

struct UnixDatagram {
  sockaddr_un from{};
  iovec iov{};
  msghdr msg{};

  /// Receives one datagram into `buf` and its control messages into `control`, never waiting:
  /// recvmsg's result (-1 with errno EAGAIN when nothing is queued).
  ssize_t receive(int fd, char* buf, size_t size, void* control, size_t control_size, int flags = 0) {
    from = sockaddr_un{};
    iov = iovec{buf, size};
    msg = msghdr{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof(from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = control_size;
    return ::recvmsg(fd, &msg, MSG_DONTWAIT | flags);
  }

  /// The path the sender is bound to; empty for an unbound sender (which cannot be answered).
  std::string sender() const {
    const size_t offset = offsetof(sockaddr_un, sun_path);
    const size_t len = msg.msg_namelen > offset ? msg.msg_namelen - offset : 0;
    return std::string(from.sun_path, ::strnlen(from.sun_path, len));
  }
};

}  // namespace cohort::detail
