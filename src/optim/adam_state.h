// One parameter's Adam / AdamW state as the fused steps keep it (fused_adam.cpp, aten_fused_adam.h):
// created the way libtorch's Adam::step() creates it, so that checkpoints, sharding and the base
// class read it unchanged. Internal.
#pragma once

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>

#include <memory>

#include "runtime/torch_compat_internal.h"

namespace cohort::detail {

/// `p`'s state in `state_map` (made on its first step, as the base class makes it), with its step
/// count advanced for the step about to be taken.
template <typename State, typename Options, typename StateMap>
State& counted_adam_state(StateMap& state_map, const at::Tensor& p, const Options& options) {
  const auto key = optimizer_state_key<StateMap>(p);
  auto it = state_map.find(key);
  if (it == state_map.end()) {
    auto s = std::make_unique<State>();
    s->step(0);
    s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
    s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    if (options.amsgrad()) s->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
    it = state_map.insert_or_assign(key, std::move(s)).first;
  }
  auto& s = static_cast<State&>(*it->second);
  s.step(s.step() + 1);
  return s;
}

}  // namespace cohort::detail
