// What the fused optimizers' loops take (FusedAdam, FusedSGD). Internal.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>

#include <functional>

namespace cohort::detail {

inline bool fusable_tensor(const at::Tensor& t, int64_t numel) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.is_contiguous() && t.numel() == numel;
}

// Elements per task when the intra-op pool splits a parameter: large enough that a task's
// start-up cost is noise against the tens of bytes of memory traffic per element.
constexpr int64_t kFusedGrain = 1 << 16;

// A fused optimizer's step(): the closure (with gradients on), then the fused loop when `fusable()`
// says every parameter can take it, else the base class's step. A step is entirely one or the other.
template <typename Fusable, typename Fused, typename Base>
at::Tensor closure_then_fused_or_base(const std::function<at::Tensor()>& closure, Fusable fusable, Fused fused,
                                      Base base) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (fusable()) {
    fused();
  } else {
    base();
  }
  return loss;
}

}  // namespace cohort::detail
