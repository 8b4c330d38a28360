// dashboard/connection_threads.h — the HTTP server's task queue: one thread per connection.
//
// httplib's own ThreadPool gives a fixed number of threads, each held by its connection until
// the request has been read. A client that drip-feeds its request a byte at a time (never idle
// for the 5 s read timeout) holds a thread for as long as it likes: 24 such connections stopped
// the dashboard answering at all (issue 22's probe). Here every connection gets a thread of its
// own, up to `max_threads` at once; a thread parked in a read costs a few pages of memory, so the
// limit is high (ConnectionThreads' users choose it) and an attack has to be that many
// connections wide before the page waits. Work beyond the limit waits in a queue, served by the
// first thread that is done. What this does not do: bound a connection's total time (httplib
// gives no hook between accept and the request being read).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace cohort::dashboard {

class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  ~ConnectionThreads() override { shutdown(); }

  /// Runs `fn` on a new thread, or queues it while `max_threads` are busy.
  void enqueue(std::function<void()> fn) override;
  /// Waits until every connection's work, queued work included, is done.
  void shutdown() override;

 private:
  void serve(std::function<void()> fn);  // a connection thread: fn, then queued work

  const size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable all_done_;
  std::deque<std::function<void()>> waiting_;
  size_t running_ = 0;
};

}  // namespace cohort::dashboard
