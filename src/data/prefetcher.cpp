// Reading mapped ranges ahead on a background thread. See prefetcher.h.
#include "data/prefetcher.h"

#include <sys/mman.h>
#include <unistd.h>

#include "data/shards/guarded_read.h"

namespace cohort::data {

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    pending_.clear();
    tasks_.clear();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::request(std::vector<Range> ranges, std::vector<Task> tasks) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(ranges);
    tasks_ = std::move(tasks);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  wake_.notify_all();
}

void Prefetcher::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return (pending_.empty() && tasks_.empty() && !busy_) || stop_; });
}

void Prefetcher::run() {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !pending_.empty() || !tasks_.empty(); });
    if (stop_) return;
    if (!tasks_.empty()) {  // one at a time: a newer request replaces the rest
      const Task task = std::move(tasks_.front());
      tasks_.erase(tasks_.begin());
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      if (pending_.empty() && tasks_.empty()) idle_.notify_all();
      continue;
    }
    const std::vector<Range> ranges = std::move(pending_);
    pending_.clear();
    busy_ = true;
    lock.unlock();
    for (const Range& r : ranges) {
      if (r.second == 0) continue;
      const uintptr_t first = reinterpret_cast<uintptr_t>(r.first) & ~(page - 1);
      const uintptr_t end = reinterpret_cast<uintptr_t>(r.first) + r.second;
      ::madvise(reinterpret_cast<void*>(first), end - first, MADV_WILLNEED);
      // One load a page: this thread waits for the disk, the trainer does not. Guarded: a shard
      // truncated under the job faults here first; the rest is left to the trainer's read, which
      // names the shard (guarded_read.h).
      if (!guarded_touch(r.first, r.second, page)) break;
    }
    lock.lock();
    busy_ = false;
    if (pending_.empty() && tasks_.empty()) idle_.notify_all();
  }
}

}  // namespace cohort::data
