// The GPU path of FusedAdam / FusedAdamW: ATen's multi-tensor fused Adam kernel (at::_fused_adam_
// / at::_fused_adamw_, what Python's `torch.optim.AdamW(fused=True)` runs), which updates every
// parameter of a group in a handful of launches. libtorch's Adam::step runs about ten kernels per
// parameter: on a GPU those launches, not the arithmetic, are the optimizer's cost (GPT-2 124M has
// 148 parameters, ~1,500 launches a step). libtorch 2.x only (the kernel came with 2.0); on 1.13
// a CUDA step stays the base class's. The CPU keeps cohort's own loop (adam_kernel.h). Internal.
//
// The state stays libtorch's (AdamParamState: an int64 step, exp_avg, exp_avg_sq,
// max_exp_avg_sq), so checkpoints and sharding see an Adam as before; the kernel reads the step
// from a float32 tensor on the parameters' device, made once per (device, step) per call.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "optim/adam_state.h"
#include "runtime/torch_compat_internal.h"

namespace cohort::detail {

/// Whether this libtorch has ATen's fused Adam kernels (libtorch 2.x).
bool aten_fused_adam_available();

/// One group's hyper-parameters, as the kernel takes them.
struct AtenAdamArgs {
  double lr = 0, beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  bool amsgrad = false;
  bool decoupled = false;  // AdamW's weight decay (else Adam's L2 on the gradient)
};

/// The tensors of one kernel call: parameters of one device at one step number.
struct AtenAdamLists {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
};

/// Updates `lists` in place for step number `step` (after its increment). Throws std::logic_error
/// on a libtorch without the kernel.
void aten_fused_adam(const AtenAdamLists& lists, int64_t step, const AtenAdamArgs& args);

/// Whether `t` can go through the kernel beside parameter `p`: dense, contiguous float32, on `p`'s
/// CUDA device (`allow_cpu`: on the CPU too, for the tests).
inline bool aten_fusable_tensor(const at::Tensor& t, const at::Tensor& p, bool allow_cpu) {
  return t.defined() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat && t.is_contiguous() &&
         t.device() == p.device() && t.sizes() == p.sizes() && (p.device().is_cuda() || (allow_cpu && p.device().is_cpu()));
}

/// Whether every parameter the step would touch can take the kernel (a step is all one or the other).
template <typename Options, typename State, typename StateMap>
bool aten_fusable_step(const std::vector<torch::optim::OptimizerParamGroup>& groups, const StateMap& state,
                       bool allow_cpu = false) {
  if (!aten_fused_adam_available()) return false;
  for (const auto& group : groups) {
    const bool amsgrad = static_cast<const Options&>(group.options()).amsgrad();
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!aten_fusable_tensor(p, p, allow_cpu) || !aten_fusable_tensor(p.grad(), p, allow_cpu)) return false;
      const auto it = state.find(optimizer_state_key<StateMap>(p));
      if (it == state.end()) continue;  // created below, like p
      const auto& s = static_cast<const State&>(*it->second);
      if (!aten_fusable_tensor(s.exp_avg(), p, allow_cpu) || !aten_fusable_tensor(s.exp_avg_sq(), p, allow_cpu)) return false;
      if (amsgrad && !aten_fusable_tensor(s.max_exp_avg_sq(), p, allow_cpu)) return false;
    }
  }
  return true;
}

/// The step through the kernel: state created and counted as the base class does, then one call
/// per (group, device, step number).
template <typename Options, typename State, typename StateMap>
void aten_fused_step(std::vector<torch::optim::OptimizerParamGroup>& groups, StateMap& state_map, bool decoupled) {
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    std::map<std::pair<int, int64_t>, AtenAdamLists> calls;  // by (device index, step)
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = counted_adam_state<State>(state_map, p, options);
      AtenAdamLists& l = calls[{p.device().index(), s.step()}];
      l.params.push_back(p);
      l.grads.push_back(p.grad());
      l.exp_avgs.push_back(s.exp_avg());
      l.exp_avg_sqs.push_back(s.exp_avg_sq());
      if (options.amsgrad()) l.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
    }
    const AtenAdamArgs args{options.lr(),           std::get<0>(options.betas()), std::get<1>(options.betas()),
                            options.weight_decay(), options.eps(),                options.amsgrad(),
                            decoupled};
    for (const auto& [where, lists] : calls) aten_fused_adam(lists, where.second, args);
  }
}

}  // namespace cohort::detail
