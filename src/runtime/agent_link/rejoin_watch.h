// RejoinWatch: says where a rank is while it re-forms its process groups (Context::rejoin), when
// that takes long (internal).
//
// Why: the other ranks wait for this one in the new groups' set-up and give up at the store
// timeout with only "Socket Timeout" to show; a rank stuck letting go of the old groups (a thread
// that waits for a peer it abandoned) would otherwise say nothing at all before it is killed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace cohort::detail {

class RejoinWatch {
 public:
  /// Warns every `every` until destroyed, naming the current stage.
  RejoinWatch(int generation, std::chrono::milliseconds every);
  ~RejoinWatch();
  RejoinWatch(const RejoinWatch&) = delete;
  RejoinWatch& operator=(const RejoinWatch&) = delete;

  /// What this rank does now ("letting go of the old groups in the Checkpointer").
  void stage(std::string what);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string stage_;
  std::thread thread_;
};

}  // namespace cohort::detail
