// CommQueue: one background thread that runs tasks in the order they were submitted (internal):
// a rank's sharded-data-parallel collectives, and the Checkpointer's async saves (a thread kept
// between saves instead of one started per save).
//
// Why a thread of our own: a ring reduce-scatter is W-1 dependent send/recv steps, which Gloo
// cannot queue as one operation; running them here lets backward go on (overlap). Why one thread
// and FIFO: Gloo matches collectives across ranks by the order they are issued, so every rank must
// issue the same ones in the same order — all of ours go through this queue, submitted in an order
// that backward makes the same on every rank.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace cohort::detail {

class CommQueue {
 public:
  CommQueue();
  ~CommQueue();  // runs what was submitted, then stops
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  /// Runs `task` after everything submitted before it; the future rethrows its exception.
  std::shared_future<void> submit(std::function<void()> task);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  // Not std::packaged_task: its future's shared state owns the callable, so the tensors a task
  // captured would live as long as anyone holds the future (a whole backward pass's gradients).
  struct Job {
    std::function<void()> task;
    std::promise<void> done;
  };
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::detail
