// Parameters and gradients for the fused optimizers' tests (FusedAdam, FusedSGD): several shapes,
// one of an odd size and one big enough to be split over intra-op tasks, and per-step gradients
// that are the same for every optimizer under test.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace cohort::testing {

// max |got - want| / max |want|: relative to the tensor's scale, so elements that pass through
// zero do not make float rounding look like a large relative error.
inline double relative_diff(const torch::Tensor& got, const torch::Tensor& want) {
  const auto g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  const double scale = w.abs().max().item<double>();
  return (g - w).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

inline std::vector<torch::Tensor> make_params(torch::ScalarType dtype = torch::kFloat) {
  auto gen = at::detail::createCPUGenerator(3);
  std::vector<torch::Tensor> out;
  for (auto shape : std::vector<std::vector<int64_t>>{{37, 13}, {1}, {300000}, {5, 4, 3}})
    out.push_back(torch::randn(shape, gen).to(dtype).set_requires_grad(true));
  return out;
}

inline std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

// Gradients for step s, with a spread of magnitudes.
inline void set_grads(std::vector<torch::Tensor>& ps, int s) {
  auto gen = at::detail::createCPUGenerator(1000 + s);
  for (auto& p : ps) p.mutable_grad() = (torch::randn(p.sizes(), gen) * (0.1 + s)).to(p.scalar_type());
}

// Steps [from, to): `first` on `a` and `second` on `b`, each step with set_grads' gradients.
template <typename First, typename Second>
void step_both(First& first, std::vector<torch::Tensor>& a, Second& second, std::vector<torch::Tensor>& b, int from,
               int to) {
  for (int s = from; s < to; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    first.step();
    second.step();
  }
}

}  // namespace cohort::testing
