// What the fused optimizers' loops take (FusedAdam, FusedSGD). Internal.
#pragma once

#include <ATen/core/Tensor.h>

namespace cohort::detail {

inline bool fusable_tensor(const at::Tensor& t, int64_t numel) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
         t.is_contiguous() && t.numel() == numel;
}

// Elements per task when the intra-op pool splits a parameter: large enough that a task's
// start-up cost is noise against the tens of bytes of memory traffic per element.
constexpr int64_t kFusedGrain = 1 << 16;

}  // namespace cohort::detail
