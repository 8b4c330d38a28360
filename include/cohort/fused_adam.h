// cohort/fused_adam.h — Adam and AdamW whose step() makes one pass over each parameter.
//
// libtorch's Adam::step() runs about ten element-wise kernels per parameter (moments, sqrt,
// division, eps, addcdiv) and allocates temporaries as big as the parameter (`denom`, the
// weight-decayed gradient), so on a CPU it reads and writes the optimizer state several times
// and page-faults fresh memory every step. FusedAdam / FusedAdamW compute the same update in a
// single loop that reads p, grad, exp_avg, exp_avg_sq once and writes p, exp_avg, exp_avg_sq once
// (as DeepSpeed's CPU Adam does for ZeRO-Offload), split over the intra-op threads.
//
// They ARE a torch::optim::Adam / AdamW: same options, same state (AdamParamState /
// AdamWParamState: step, exp_avg, exp_avg_sq, max_exp_avg_sq), same state_dict and serialisation,
// so cohort's checkpointer and sharded data parallel treat them as Adam / AdamW, and a checkpoint
// saved with one restores into the other. The update follows libtorch 1.13's formulas operation by
// operation in float; results match torch::optim::Adam to float rounding (tests assert ≤ 1e-6
// relative), and are bitwise the same on every rank given the same inputs.
//
// The fused loop handles dense, contiguous float32 CPU parameters and gradients (amsgrad too).
// On libtorch 2.x, dense contiguous float32 CUDA parameters go through ATen's multi-tensor fused
// kernel instead (what Python's `AdamW(fused=True)` runs: a few launches per step instead of
// about ten per parameter). Anything else — another dtype, non-contiguous or sparse tensors,
// CUDA on libtorch 1.13 — makes the whole step fall back to the base class's step(), unchanged.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace cohort {

/// A torch::optim::Adam whose step() makes one pass over each parameter: same options, state and
/// serialisation, the same results to float rounding.
class FusedAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  /// Adam's step: the closure (if any) first, then the fused loop where every parameter allows it,
  /// else torch::optim::Adam::step(). Returns the closure's loss.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

/// A torch::optim::AdamW whose step() makes one pass over each parameter: same options, state and
/// serialisation, the same results to float rounding.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  /// AdamW's step: the closure (if any) first, then the fused loop where every parameter allows it,
  /// else torch::optim::AdamW::step(). Returns the closure's loss.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace cohort
