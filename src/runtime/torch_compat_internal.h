// runtime/torch_compat_internal.h — the libtorch 1.13 / 2.x differences only cohort's own code
// meets (the public ones are in cohort/torch_compat.h).
//
// Optimizer state: 1.13 keys torch::optim::Optimizer::state() by the parameter's TensorImpl address
// printed as text; later versions key it by the address itself. optimizer_state_key() follows the
// map's key type, so the checkpointer works with both.
#pragma once

#include <sstream>
#include <string>
#include <type_traits>

#include "cohort/torch_compat.h"

namespace cohort {

// Reduce-scatter and allgather on one flat tensor (sharded data parallel): NCCL has them as
// _reduce_scatter_base / _allgather_base on 1.13 and 2.x; 1.13's Gloo has neither (it throws), so
// cohort builds them from send/recv, allgather and allreduce there (src/parallel/sharded/shard_collectives.h).
inline bool has_native_flat_collectives(Backend& group) { return group.getBackendName() != "gloo"; }
inline WorkHandle native_reduce_scatter(Backend& group, at::Tensor& output, at::Tensor& input) {
  return group._reduce_scatter_base(output, input, c10d::ReduceScatterOptions());
}
inline WorkHandle native_allgather(Backend& group, at::Tensor& output, at::Tensor& input) {
  return group._allgather_base(output, input, c10d::AllgatherOptions());
}

// The TCPStore's server binds every interface; from libtorch 2.8 it can take a listening socket
// instead (TCPStoreOptions::masterListenFd, in both of its backends), which cohort binds to the
// master address only. 1.13 has no such option.
// ATen's multi-tensor fused Adam / AdamW kernels (at::_fused_adam_, at::_fused_adamw_), which
// FusedAdam / FusedAdamW run on CUDA parameters (src/optim/aten_fused_adam.h): libtorch 2.0 on.
#define COHORT_HAS_ATEN_FUSED_ADAM (TORCH_VERSION_MAJOR >= 2)

#define COHORT_TCPSTORE_TAKES_LISTEN_FD (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))

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

}  // namespace cohort
