// The fused SGD update on raw float arrays (FusedSGD's inner loop). Torch-free, so it is compiled
// with its own flags (sgd_kernel.cpp). Internal.
#pragma once

#include <cstdint>

namespace cohort::detail {

// Every coefficient as libtorch's element-wise kernels see it: the double option rounded to float.
struct SgdCoeffs {
  float weight_decay = 0;  // 0: none
  float momentum = 0;      // 0: no buffer
  float one_minus_dampening = 1;
  float neg_lr = 0;
  bool nesterov = false;
  bool first = false;  // the buffer does not exist yet: it becomes the (decayed) gradient
};

/// Elements [0, n) of one parameter: updates p and buf (null when c.momentum == 0) in place,
/// reading g. The arrays must not overlap.
void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c);

}  // namespace cohort::detail
