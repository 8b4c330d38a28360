// The fused Adam / AdamW update on raw float arrays (FusedAdam's inner loop). Torch-free, so it can
// be compiled with the flags that let the loop vectorise (adam_kernel.cpp) without touching the rest.
// Internal.
#pragma once

#include <cstdint>

namespace cohort::detail {

// Every coefficient as libtorch's element-wise kernels see it: the double from the optimizer's
// options or bias corrections, rounded once to float.
struct AdamCoeffs {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bias_correction2;
  float eps;
  float neg_step_size;  // -lr / bias_correction1
  float l2 = 0;         // Adam's weight decay: grad + l2 * p (0: none)
  float decay = 1;      // AdamW's decoupled decay: p * (1 - lr * weight_decay) (1: none)
  bool use_l2 = false, use_decay = false, amsgrad = false;
};

/// Elements [0, n) of one parameter: updates p, exp_avg, exp_avg_sq (and max_exp_avg_sq when
/// c.amsgrad; may be null otherwise) in place, reading g. The arrays must not overlap.
void adam_update(float* p, const float* g, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                 const AdamCoeffs& c);

}  // namespace cohort::detail
