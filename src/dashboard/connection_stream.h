// dashboard/connection_stream.h — an httplib::Stream over one accepted connection.
//
// The request gate (request_gate.h) takes connections away from httplib's accept loop, so the
// dashboard answers them itself through httplib's request processing, which reads and writes
// through a Stream. This one does what httplib's own socket stream does: reads buffered (httplib
// reads a request's lines a byte at a time) and wait at most the read timeout, writes wait at most
// the write timeout, and a connection whose peer has gone is not writable (a live stream's page
// closed: its thread ends at the next write).
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

namespace cohort::dashboard {

class ConnectionStream : public httplib::Stream {
 public:
  /// `read_deadline`: no read waits past it (the whole request has its deadline, not each read).
  ConnectionStream(int fd, std::chrono::steady_clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : fd_(fd), read_deadline_(read_deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  const int fd_;
  const std::chrono::steady_clock::time_point read_deadline_;
  const std::chrono::milliseconds write_timeout_;
  char buffer_[4096];
  size_t buffered_ = 0;  // bytes in buffer_ from `consumed_` on
  size_t consumed_ = 0;
};

}  // namespace cohort::dashboard
