// FusedAdam / FusedAdamW: libtorch's Adam / AdamW step() with the element-wise work done by one
// fused loop per parameter (adam_kernel.h) on the CPU, and by ATen's multi-tensor fused kernel on
// CUDA (aten_fused_adam.h). State handling — creation, keys, fields — is the base class's, line
// for line, so everything that reads an Adam's state keeps working.
#include "cohort/fused_adam.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>

#include "cohort/torch_compat.h"
#include "optim/adam_kernel.h"
#include "optim/adam_state.h"
#include "optim/aten_fused_adam.h"
#include "optim/fusable.h"
#include "runtime/torch_compat_internal.h"

namespace cohort {

namespace {

using torch::Tensor;

using detail::fusable_tensor;

// Whether every parameter the step would touch can take the fused loop. Checked for the whole
// step first, so a step is either entirely fused or entirely the base class's.
template <typename Options, typename State, typename StateMap>
bool fusable_step(const std::vector<torch::optim::OptimizerParamGroup>& groups, const StateMap& state) {
  for (const auto& group : groups) {
    const bool amsgrad = static_cast<const Options&>(group.options()).amsgrad();
    for (const auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (!fusable_tensor(p, p.numel()) || !fusable_tensor(g, p.numel())) return false;
      const auto it = state.find(optimizer_state_key<StateMap>(p));
      if (it == state.end()) continue;  // created below, contiguous
      const auto& s = static_cast<const State&>(*it->second);
      if (!fusable_tensor(s.exp_avg(), p.numel()) || !fusable_tensor(s.exp_avg_sq(), p.numel())) return false;
      if (amsgrad && !fusable_tensor(s.max_exp_avg_sq(), p.numel())) return false;
    }
  }
  return true;
}

template <typename Options, typename State, typename StateMap>
void fused_step(std::vector<torch::optim::OptimizerParamGroup>& groups, StateMap& state_map, bool decoupled) {
  for (auto& group : groups) {
    auto& options = static_cast<Options&>(group.options());
    for (auto& p : group.params()) {
      const auto& grad = p.grad();
      if (!grad.defined()) continue;
      auto& s = detail::counted_adam_state<State>(state_map, p, options);
      const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
      const double bias_correction1 = 1 - std::pow(beta1, s.step());
      const double bias_correction2 = 1 - std::pow(beta2, s.step());

      detail::AdamCoeffs c;
      c.beta1 = static_cast<float>(beta1);
      c.one_minus_beta1 = static_cast<float>(1 - beta1);
      c.beta2 = static_cast<float>(beta2);
      c.one_minus_beta2 = static_cast<float>(1 - beta2);
      c.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
      c.eps = static_cast<float>(options.eps());
      c.neg_step_size = static_cast<float>(-(options.lr() / bias_correction1));
      if (options.weight_decay() != 0) {
        if (decoupled) {
          c.use_decay = true;
          c.decay = static_cast<float>(1 - options.lr() * options.weight_decay());
        } else {
          c.use_l2 = true;
          c.l2 = static_cast<float>(options.weight_decay());
        }
      }
      c.amsgrad = options.amsgrad();

      float* pp = p.data_ptr<float>();
      const float* gp = grad.data_ptr<float>();
      float* mp = s.exp_avg().template data_ptr<float>();
      float* vp = s.exp_avg_sq().template data_ptr<float>();
      float* vmaxp = c.amsgrad ? s.max_exp_avg_sq().template data_ptr<float>() : nullptr;
      at::parallel_for(0, p.numel(), detail::kFusedGrain, [&](int64_t begin, int64_t end) {
        detail::adam_update(pp + begin, gp + begin, mp + begin, vp + begin, vmaxp ? vmaxp + begin : nullptr,
                            end - begin, c);
      });
      // The in-place ops of the base class bump these counters; code that watches a parameter's
      // version (autograd's saved-tensor checks, sharded gathers) must see the same.
      torch::autograd::impl::bump_version(p);
      torch::autograd::impl::bump_version(s.exp_avg());
      torch::autograd::impl::bump_version(s.exp_avg_sq());
      if (c.amsgrad) torch::autograd::impl::bump_version(s.max_exp_avg_sq());
    }
  }
}

// The step of both classes. `decoupled`: AdamW's weight decay.
template <typename Options, typename State, typename Base, typename StateMap>
Tensor fused_or_base_step(Base& self, torch::optim::Optimizer::LossClosure closure,
                          std::vector<torch::optim::OptimizerParamGroup>& groups, StateMap& state, bool decoupled) {
  return detail::closure_then_fused_or_base(
      closure, [&] { return fusable_step<Options, State>(groups, state); },
      [&] { fused_step<Options, State>(groups, state, decoupled); },
      [&] {
        if (detail::aten_fusable_step<Options, State>(groups, state)) {
          detail::aten_fused_step<Options, State>(groups, state, decoupled);
        } else {
          self.Base::step(nullptr);
        }
      });
}

}  // namespace

Tensor FusedAdam::step(LossClosure closure) {
  return fused_or_base_step<torch::optim::AdamOptions, torch::optim::AdamParamState, torch::optim::Adam>(
      *this, std::move(closure), param_groups_, state_, /*decoupled=*/false);
}

Tensor FusedAdamW::step(LossClosure closure) {
  return fused_or_base_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState, torch::optim::AdamW>(
      *this, std::move(closure), param_groups_, state_, /*decoupled=*/true);
}

}  // namespace cohort
