// The compiled half of cohort/torch_compat.h: what differs between libtorch versions and is too
// heavy for the header (ATen's autocast API).
#include "cohort/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>

#include "runtime/torch_compat_internal.h"

// 2.4 made autocast's state per device type; before, CUDA's had functions of its own.
#define COHORT_AUTOCAST_PER_DEVICE (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

namespace cohort {

AutocastGuard::AutocastGuard(c10::ScalarType dtype, bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
#if COHORT_AUTOCAST_PER_DEVICE
  was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  was_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  was_enabled_ = at::autocast::is_enabled();
  was_dtype_ = at::autocast::get_autocast_gpu_dtype();
  at::autocast::set_enabled(true);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if COHORT_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
  at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
#else
  at::autocast::set_enabled(was_enabled_);
  at::autocast::set_autocast_gpu_dtype(was_dtype_);
#endif
}

torch::optim::OptimizerParamState* optimizer_state_of(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& state = optimizer.state();
  auto it = state.find(optimizer_state_key<std::decay_t<decltype(state)>>(param));
  return it == state.end() ? nullptr : it->second.get();
}

}  // namespace cohort
