// FusedSGD: libtorch's SGD step() with the element-wise work done by one fused loop per parameter
// (sgd_kernel.h). State handling — the momentum buffer's creation, key and field — is the base
// class's, so everything that reads an SGD's state keeps working.
#include "cohort/fused_sgd.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/variable.h>

#include "cohort/torch_compat.h"
#include "optim/fusable.h"
#include "optim/sgd_kernel.h"
#include "runtime/torch_compat_internal.h"

namespace cohort {

namespace {

using detail::fusable_tensor;
using torch::optim::SGDOptions;
using torch::optim::SGDParamState;

// Every parameter the step touches can take the fused loop: a step is entirely fused or entirely
// the base class's.
template <typename StateMap>
bool fusable_step(const std::vector<torch::optim::OptimizerParamGroup>& groups, const StateMap& state) {
  for (const auto& group : groups) {
    const bool momentum = static_cast<const SGDOptions&>(group.options()).momentum() != 0;
    for (const auto& p : group.params()) {
      const auto& g = p.grad();
      if (!g.defined()) continue;
      if (!fusable_tensor(p, p.numel()) || !fusable_tensor(g, p.numel())) return false;
      if (!momentum) continue;
      const auto it = state.find(optimizer_state_key<StateMap>(p));
      if (it != state.end() && !fusable_tensor(static_cast<const SGDParamState&>(*it->second).momentum_buffer(), p.numel()))
        return false;
    }
  }
  return true;
}

template <typename StateMap>
void fused_step(std::vector<torch::optim::OptimizerParamGroup>& groups, StateMap& state_map) {
  for (auto& group : groups) {
    const auto& options = static_cast<const SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      const auto& grad = p.grad();
      if (!grad.defined()) continue;
      detail::SgdCoeffs c;
      c.weight_decay = static_cast<float>(options.weight_decay());
      c.momentum = static_cast<float>(options.momentum());
      c.one_minus_dampening = static_cast<float>(1 - options.dampening());
      c.neg_lr = static_cast<float>(-1 * options.lr());
      c.nesterov = options.nesterov();
      float* buf = nullptr;
      torch::Tensor buffer;
      if (options.momentum() != 0) {
        const auto key = optimizer_state_key<StateMap>(p);
        auto it = state_map.find(key);
        if (it == state_map.end()) {  // the base class clones the gradient; the loop writes it
          auto s = std::make_unique<SGDParamState>();
          s->momentum_buffer(torch::empty_like(p, torch::MemoryFormat::Contiguous));
          it = state_map.insert_or_assign(key, std::move(s)).first;
          c.first = true;
        }
        buffer = static_cast<SGDParamState&>(*it->second).momentum_buffer();
        buf = buffer.data_ptr<float>();
      }
      float* pp = p.data_ptr<float>();
      const float* gp = grad.data_ptr<float>();
      at::parallel_for(0, p.numel(), detail::kFusedGrain, [&](int64_t begin, int64_t end) {
        detail::sgd_update(pp + begin, gp + begin, buf ? buf + begin : nullptr, end - begin, c);
      });
      // The base class's in-place ops bump these counters; code watching a version must see it.
      torch::autograd::impl::bump_version(p);
      if (buffer.defined() && !c.first) torch::autograd::impl::bump_version(buffer);
    }
  }
}

}  // namespace

torch::Tensor FusedSGD::step(LossClosure closure) {
  return detail::closure_then_fused_or_base(
      closure, [&] { return fusable_step(param_groups_, state_); }, [&] { fused_step(param_groups_, state_); },
      [&] { torch::optim::SGD::step(nullptr); });
}

}  // namespace cohort
