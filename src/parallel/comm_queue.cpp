#include "comm_queue.h"

namespace cohort::detail {

CommQueue::CommQueue() : thread_([this] { run(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

std::shared_future<void> CommQueue::submit(std::function<void()> task) {
  Job job{std::move(task), {}};
  auto future = job.done.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return future;
}

void CommQueue::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      job.task();
    } catch (...) {
      error = std::current_exception();
    }
    job.task = nullptr;  // the captured tensors go now, before anyone learns the task is done
    if (error) {
      job.done.set_exception(error);
    } else {
      job.done.set_value();
    }
  }
}

}  // namespace cohort::detail
