#include "rejoin_watch.h"

#include <cmath>

#include "runtime/duration_text.h"
#include "runtime/log.h"

namespace cohort::detail {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RejoinWatch::RejoinWatch(int generation, std::chrono::milliseconds every) {
  thread_ = std::thread([this, generation, every] {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, every, [&] { return done_; })) {
      log_warn("re-forming the process groups as generation " + std::to_string(generation) + ": still " + stage_ +
               " after " + seconds_text(std::round(seconds_since(start) * 10) / 10) +
               "; the other ranks wait for this one meanwhile");
    }
  });
}

RejoinWatch::~RejoinWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RejoinWatch::stage(std::string what) {
  std::lock_guard<std::mutex> lock(mutex_);
  stage_ = std::move(what);
}

}  // namespace cohort::detail
