// cohort/fused_sgd.h — SGD (momentum, dampening, Nesterov, weight decay) whose step() makes one
// pass over each parameter.
//
// libtorch's SGD::step() runs three element-wise kernels per parameter with momentum (buf *= m;
// buf += (1 - dampening) g; p -= lr buf), reading and writing the momentum buffer twice and
// allocating a parameter-sized temporary when weight decay or Nesterov is on. FusedSGD reads p, grad
// and the buffer once and writes p and the buffer once — about 40% less memory traffic, which is
// what a CPU step of a big model is bound by (docs/BENCHMARKS.md, issue 2).
//
// It IS a torch::optim::SGD: same options, same state (SGDParamState: momentum_buffer), same
// state_dict, so checkpoints move between the two. Each element goes through libtorch 1.13's
// operations in their order with the same roundings (ATen's vectorised `add(x, alpha)` is a fused
// multiply-add, and so is ours where the CPU has FMA), so results are bitwise those of
// torch::optim::SGD on such CPUs (tests assert equality), and within float rounding elsewhere.
//
// The fused loop handles dense, contiguous float32 CPU parameters, gradients and buffers. Anything
// else makes the whole step fall back to the base class's step(), unchanged.
#pragma once

#include <torch/optim/sgd.h>

namespace cohort {

/// A torch::optim::SGD whose step() makes one pass over each parameter: same options, state and
/// state_dict, bitwise the same results on CPUs with FMA.
class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  /// SGD's step: the closure (if any) first, then the fused loop where every parameter allows it,
  /// else torch::optim::SGD::step(). Returns the closure's loss.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace cohort
