// Shared by the worker monitor's tests (worker_monitor_test.cpp, worker_monitor_datagram_test.cpp):
// monitor options, a barrier for ranks as threads, bitwise comparison and one DDP training step.
#pragma once

#include <condition_variable>
#include <limits>
#include <mutex>
#include <vector>

#include "cohort/monitor.h"
#include "support/ddp_fixtures.h"

namespace worker_monitor_test {

using namespace cohort::testing;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline cohort::MonitorOptions opts(cohort::OnNan on_nan = cohort::OnNan::stop, bool enabled = true) {
  cohort::MonitorOptions o;
  o.enabled = enabled;
  o.on_nan = on_nan;
  return o;
}

// All threads wait here until `n` arrived (std::barrier is C++20).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

inline bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// One training step of SmallNet through DDP, on this rank's half of the batch; `nan` poisons the loss.
template <typename Model>
torch::Tensor train_step(Model& model, torch::optim::Optimizer& opt, const Batch& b, int rank, int world,
                         bool nan = false) {
  opt.zero_grad();
  const int64_t rows = b.x.size(0) / world;
  auto loss = torch::nll_loss(model->forward(b.x.narrow(0, rank * rows, rows)), b.y.narrow(0, rank * rows, rows));
  if (nan) loss = loss * kNaN;
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace worker_monitor_test
