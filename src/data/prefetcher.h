// data/prefetcher.h — brings the bytes of the next batches into the page cache on a background
// thread, so that the training thread finds them in memory instead of waiting for the disk in a
// page fault. For memory-mapped shards: madvise(WILLNEED) starts the reads, then one load per page
// waits for them here rather than in the trainer. Torch-free; used by ShardedDataset.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace cohort::data {

/// One background thread that reads ranges of mapped files ahead. Thread-safe.
class Prefetcher {
 public:
  using Range = std::pair<const uint8_t*, size_t>;
  Prefetcher() = default;
  /// Stops the thread (a range it is reading is finished first).
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// Replaces the ranges still waiting with `ranges` (the newest request is the one that matters).
  /// Starts the thread on first use.
  void request(std::vector<Range> ranges);
  /// Returns once every requested range was read (tests).
  void wait_idle();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<Range> pending_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::data
