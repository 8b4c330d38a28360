// The one call of ATen's fused Adam kernel (aten_fused_adam.h), kept out of the header so that
// only this file sees ATen's operator declarations.
#include "optim/aten_fused_adam.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace cohort::detail {

bool aten_fused_adam_available() { return COHORT_HAS_ATEN_FUSED_ADAM; }

void aten_fused_adam(const AtenAdamLists& l, int64_t step, const AtenAdamArgs& a) {
#if COHORT_HAS_ATEN_FUSED_ADAM
  if (l.params.empty()) return;
  // The kernel reads each parameter's step from a float32 tensor on its device; one serves all.
  const at::Tensor step_tensor =
      at::full({}, static_cast<double>(step), at::TensorOptions().dtype(at::kFloat).device(l.params.front().device()));
  const std::vector<at::Tensor> steps(l.params.size(), step_tensor);
  if (a.decoupled) {
    at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, steps, a.lr, a.beta1, a.beta2,
                      a.weight_decay, a.eps, a.amsgrad, /*maximize=*/false);
  } else {
    at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, steps, a.lr, a.beta1, a.beta2,
                     a.weight_decay, a.eps, a.amsgrad, /*maximize=*/false);
  }
#else
  (void)l, (void)step, (void)a;
  throw std::logic_error("this libtorch has no fused Adam kernel (libtorch 2.0 or later has)");
#endif
}

}  // namespace cohort::detail
