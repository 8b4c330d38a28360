// data/prefetcher.h — brings the bytes of the next batches into the page cache on a background
// thread, so that the training thread finds them in memory instead of waiting for the disk in a
// page fault. For memory-mapped shards: madvise(WILLNEED) starts the reads, then one load per page
// waits for them here rather than in the trainer. For remote shards it runs tasks instead: fetches
// of the shards the next batches need into the local cache. Torch-free; used by ShardedDataset.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace cohort::data {

/// One background thread that reads ranges of mapped files ahead. Thread-safe.
class Prefetcher {
 public:
  using Range = std::pair<const uint8_t*, size_t>;
  using Task = std::function<void()>;  ///< must not throw
  Prefetcher() = default;
  /// Stops the thread (a range it is reading is finished first).
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// Replaces the ranges and tasks still waiting with these (the newest request is the one that
  /// matters); tasks run first, in order. Starts the thread on first use.
  void request(std::vector<Range> ranges, std::vector<Task> tasks = {});
  /// Returns once every requested range was read and task run (tests).
  void wait_idle();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<Range> pending_;
  std::vector<Task> tasks_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::data
