// The GPT example's tanh-GELU kernel (examples/gpt/gelu_tanh.h) against ATen's torch::gelu(x,
// "tanh"), forward and backward, on the tiny preset's MLP activation (batch 8 × 256 tokens ×
// 1024 features) by default, one intra-op thread, freed memory kept (as in training under cohort),
// interleaved repetitions; prints one JSON line of median milliseconds.   usage: build/bench/gelu_kernel [ELEMENTS (2097152)] [REPS (30)]
#include <cohort/memory_reuse.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "../examples/gpt/gelu_tanh.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of one forward and one backward of `gelu` on x, gradient g.
template <typename Gelu>
std::pair<double, double> time_once(Gelu gelu, const torch::Tensor& x, const torch::Tensor& g) {
  using clock = std::chrono::steady_clock;
  auto xr = x.detach().requires_grad_(true);
  const auto t0 = clock::now();
  auto y = gelu(xr);
  const auto t1 = clock::now();
  y.backward(g);
  const auto t2 = clock::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(),
          std::chrono::duration<double, std::milli>(t2 - t1).count()};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 8 * 256 * 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  at::set_num_threads(1);
  cohort::retain_freed_memory();  // as cohort::init() does: no page faults for each new output
  torch::manual_seed(0);
  const auto x = torch::randn({n}) * 2.0, g = torch::randn({n});
  std::vector<double> af, ab, of, ob;
  for (int r = 0; r < reps + 2; ++r) {  // the first two warm the allocator and caches
    const auto [a1, a2] = time_once([](const torch::Tensor& t) { return torch::gelu(t, "tanh"); }, x, g);
    const auto [o1, o2] = time_once([](const torch::Tensor& t) { return gelu_tanh(t); }, x, g);
    if (r < 2) continue;
    af.push_back(a1), ab.push_back(a2), of.push_back(o1), ob.push_back(o2);
  }
  nlohmann::json out = {{"elements", n}, {"reps", reps}, {"torch", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR)},
                        {"aten_forward_ms", median(af)}, {"aten_backward_ms", median(ab)},
                        {"ours_forward_ms", median(of)}, {"ours_backward_ms", median(ob)}};
  std::cout << out.dump() << std::endl;
}
