// dashboard/connection_threads.h — threads for the requests being answered: one per connection.
//
// The request gate (request_gate.h) hands a connection over once its request headers are in, so a
// thread here reads a complete request and answers it at once; only a live stream holds its thread
// for long (and the server allows 16 of those). Each connection gets a thread of its own, up to
// `max_threads` at once; beyond that, work waits in a queue, served by the first thread that is
// done. (Before the gate, httplib's fixed pool of 24 threads, each held by a connection until its
// request had been read, was what 24 drip-feeding clients took away: issue 22's probe.)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace cohort::dashboard {

class ConnectionThreads {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  ~ConnectionThreads() { shutdown(); }

  /// Runs `fn` on a new thread, or queues it while `max_threads` are busy.
  void enqueue(std::function<void()> fn);
  /// Waits until every connection's work, queued work included, is done.
  void shutdown();

 private:
  void serve(std::function<void()> fn);  // a connection thread: fn, then queued work

  const size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable all_done_;
  std::deque<std::function<void()>> waiting_;
  size_t running_ = 0;
};

}  // namespace cohort::dashboard
