// One thread per connection for the HTTP server. See connection_threads.h.
#include "dashboard/connection_threads.h"

#include <system_error>
#include <thread>

namespace cohort::dashboard {

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (running_ < max_threads_) {
    ++running_;
    try {
      // Detached: shutdown() waits on the count instead of joining, so a finished thread needs
      // no one to collect it while the server runs on.
      std::thread([this, fn]() mutable { serve(std::move(fn)); }).detach();
      return;
    } catch (const std::system_error&) {  // the system's thread limit: queue it instead
      --running_;
    }
  }
  if (running_ > 0) {
    waiting_.push_back(std::move(fn));
    return;
  }
  lock.unlock();
  fn();  // no thread at all could be had: serve it here rather than never
}

void ConnectionThreads::serve(std::function<void()> fn) {
  for (;;) {
    fn();
    std::lock_guard<std::mutex> lock(mutex_);
    if (waiting_.empty()) {
      // The last touch of *this: shutdown() may return and destroy it as soon as the lock is free.
      if (--running_ == 0) all_done_.notify_all();
      return;
    }
    fn = std::move(waiting_.front());
    waiting_.pop_front();
  }
}

void ConnectionThreads::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  all_done_.wait(lock, [this] { return running_ == 0 && waiting_.empty(); });
}

}  // namespace cohort::dashboard
