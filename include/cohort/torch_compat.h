// cohort/torch_compat.h — the differences between libtorch 1.13 and 2.x, in one place.
//
// 1.13: collectives live on c10d::ProcessGroup, and ProcessGroupGloo derives from it.
// 2.x:  c10d::ProcessGroup dispatches to a c10d::Backend; ProcessGroupGloo / ProcessGroupNCCL are
//       Backends with the same allreduce/broadcast/allgather/barrier signatures.
// cohort calls the Gloo / NCCL object directly through `cohort::Backend`, which is the common base.
// For programs: COHORT_HAS_SDPA (at::scaled_dot_product_attention exists from 2.0 on), AutocastGuard
// (C++ autocast, whose functions became per-device in 2.4) and optimizer_state_of (the optimizer
// state's key type changed in 2.0); src/runtime/torch_compat.cpp implements them. The differences
// only cohort's implementation meets are in src/runtime/torch_compat_internal.h.
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

/// Whether at::scaled_dot_product_attention exists (libtorch 2.0 on), for `#if COHORT_HAS_SDPA`.
#define COHORT_HAS_SDPA (TORCH_VERSION_MAJOR >= 2)

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace cohort {

/// The object cohort calls collectives on: c10d::Backend on libtorch 2.x, c10d::ProcessGroup on
/// 1.13 (the common base of ProcessGroupGloo and ProcessGroupNCCL).
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif
/// A collective's pending result, to wait() on.
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

/// The optimizer's state for `param` (SGD's momentum buffer, Adam's moments), or nullptr before
/// its first step. libtorch 1.13 keys Optimizer::state() by the parameter's address as text, 2.x
/// by the address itself; this finds it on either.
torch::optim::OptimizerParamState* optimizer_state_of(torch::optim::Optimizer& optimizer, const at::Tensor& param);

/// Mixed precision on CUDA for the scope, as Python's `with torch.autocast("cuda", dtype)`: ops on
/// autocast's lists run in `dtype` (bf16 or fp16); the cast cache is cleared when the outermost
/// guard ends. `enabled = false` makes it a no-op, for code that runs on CPU and GPU alike.
class AutocastGuard {
 public:
  /// Turns CUDA autocast on in `dtype` for the guard's life (nothing when `enabled` is false).
  explicit AutocastGuard(c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Float;
};

}  // namespace cohort
