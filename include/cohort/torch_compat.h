// cohort/torch_compat.h — the differences between libtorch 1.13 and 2.x, in one place.
//
// 1.13: collectives live on c10d::ProcessGroup, and ProcessGroupGloo derives from it.
// 2.x:  c10d::ProcessGroup dispatches to a c10d::Backend; ProcessGroupGloo / ProcessGroupNCCL are
//       Backends with the same allreduce/broadcast/allgather/barrier signatures.
// cohort calls the Gloo / NCCL object directly through `cohort::Backend`, which is the common base.
// Optimizer state: 1.13 keys torch::optim::Optimizer::state() by the parameter's TensorImpl address
// printed as text; later versions key it by the address itself. optimizer_state_key() follows the
// map's key type, so the checkpointer works with both.
// For programs: COHORT_HAS_SDPA (at::scaled_dot_product_attention exists from 2.0 on) and
// AutocastGuard (C++ autocast, whose functions became per-device in 2.4; src/runtime/torch_compat.cpp).
#pragma once

#include <sstream>
#include <string>
#include <type_traits>

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#define COHORT_HAS_SDPA (TORCH_VERSION_MAJOR >= 2)

namespace cohort {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

// Reduce-scatter and allgather on one flat tensor (sharded data parallel): NCCL has them as
// _reduce_scatter_base / _allgather_base on 1.13 and 2.x; 1.13's Gloo has neither (it throws), so
// cohort builds them from send/recv, allgather and allreduce there (src/parallel/shard_collectives.h).
inline bool has_native_flat_collectives(Backend& group) { return group.getBackendName() != "gloo"; }
inline WorkHandle native_reduce_scatter(Backend& group, at::Tensor& output, at::Tensor& input) {
  return group._reduce_scatter_base(output, input, c10d::ReduceScatterOptions());
}
inline WorkHandle native_allgather(Backend& group, at::Tensor& output, at::Tensor& input) {
  return group._allgather_base(output, input, c10d::AllgatherOptions());
}

template <typename StateMap, typename TensorT>
typename StateMap::key_type optimizer_state_key(const TensorT& param) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;  // what c10::guts::to_string(impl) gives
    key << param.unsafeGetTensorImpl();
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

/// Mixed precision on CUDA for the scope, as Python's `with torch.autocast("cuda", dtype)`: ops on
/// autocast's lists run in `dtype` (bf16 or fp16); the cast cache is cleared when the outermost
/// guard ends. `enabled = false` makes it a no-op, for code that runs on CPU and GPU alike.
class AutocastGuard {
 public:
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
