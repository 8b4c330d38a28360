// dashboard/request_gate.h — connections wait for their request without holding a thread.
//
// httplib gives each accepted connection a thread that then reads the request, a recv at a time,
// each with the 5 s read timeout. A client that drip-feeds its request a byte at a time (never
// idle for 5 s) holds that thread as long as it likes: with httplib's pool of 24, 24 such clients
// stopped the dashboard (issue 22's probe); with a thread per connection, 256 of them did.
// Here an accepted connection is parked in one epoll set, with no thread, until the end of its
// request headers has arrived (seen with MSG_PEEK, so httplib still reads the whole request
// itself); only then is it handed to a thread, which reads and answers at once. A connection
// whose headers are not complete within the deadline is closed, and so is the oldest parked one
// when `max_parked` are waiting: an attack costs the server one file descriptor per connection
// for at most the deadline, and the page keeps answering however many connections drip.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "dashboard/connection_threads.h"

namespace cohort::dashboard {

struct RequestGateOptions {
  std::chrono::milliseconds deadline{10000};  // from accept to the end of the request headers
  size_t max_parked = 4096;                   // connections waiting for their headers at once
  size_t max_threads = 256;                   // connections being answered at once (streams included)
};

class RequestGate {
 public:
  /// `serve(fd)` reads the request on fd, answers it and closes fd (httplib's own processing).
  RequestGate(std::function<void(int)> serve, RequestGateOptions options);
  ~RequestGate();  // stop()
  RequestGate(const RequestGate&) = delete;
  RequestGate& operator=(const RequestGate&) = delete;

  /// Takes an accepted connection: it is served once its request headers are in, else closed.
  void park(int fd);
  /// Closes every parked connection and waits until the ones being served are done.
  void stop();

 private:
  void watch();                 // the epoll thread
  void examine(int fd);         // new bytes or a hang-up on a parked connection
  void unpark(int fd);          // out of the set and the table (mutex held)
  void close_oldest();          // the oldest arrival, if it still waits (mutex held)
  void close_expired();         // past the deadline (mutex held)

  const std::function<void(int)> serve_;
  const RequestGateOptions options_;
  ConnectionThreads threads_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: stop() wakes the watcher
  std::mutex mutex_;
  // Parked connections: fd -> the number of its parking. arrivals_ holds them in the order they
  // came, for the deadline and for making room; an entry whose fd has been served since (or
  // closed, and the number reused) no longer matches parked_ and is skipped.
  struct Arrival {
    std::chrono::steady_clock::time_point deadline;
    unsigned long long seq;
    int fd;
  };
  std::map<int, unsigned long long> parked_;
  std::deque<Arrival> arrivals_;
  unsigned long long next_seq_ = 0;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace cohort::dashboard
