// Gradient clipping by the global norm for the GPT example's DDP and DiLoCo modes.
#pragma once

#include <torch/torch.h>

#include <vector>

/// torch::nn::utils::clip_grad_norm_(params, max_norm) with its kernels, so its values, but without
/// reading the norm back: libtorch's returns it as a double, which on a GPU waits for the device
/// at every step before the optimizer's kernels are even queued. Returns the norm as a tensor
/// (undefined where no parameter has a gradient).
inline torch::Tensor clip_grad_norm_queued(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return {};
  for (const auto& g : grads) norms.push_back(g.norm(2.0));
  const auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2.0);
  const auto coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (auto& g : grads) g.mul_(coef);
  return total;
}
