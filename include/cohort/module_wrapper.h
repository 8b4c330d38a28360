// cohort/module_wrapper.h — what cohort's module wrappers (DistributedDataParallel,
// ShardedDataParallel, LocalSGD) have in common: switching gradient synchronisation off for a
// scope (gradient accumulation, `auto guard = model->no_sync();`) and the batch size a forward
// call counts for cohort::monitor().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace cohort {

/// A wrapper whose backward passes may keep their gradients local.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Whether the next backward synchronises gradients over the ranks (true unless turned off).
  virtual bool sync_enabled() const = 0;
  /// Turns synchronisation of the following backward passes on or off; NoSyncGuard does it for a
  /// scope. Every rank must make the same choice for the same backward.
  virtual void set_sync_enabled(bool enabled) = 0;
};

/// Scope in which backward accumulates gradients locally, without communication (gradient
/// accumulation); the first backward after the scope synchronises the accumulated sums. The one
/// guard of every wrapper's no_sync(); with a null target (LocalSGD, whose local steps never
/// communicate) it does nothing.
class NoSyncGuard {
 public:
  /// Turns synchronisation off on `target` until the guard ends; a null target: nothing.
  explicit NoSyncGuard(GradientSync* target) : target_(target), previous_(target && target->sync_enabled()) {
    if (target_) target_->set_sync_enabled(false);
  }
  /// Takes over `other`'s scope (`other` then restores nothing).
  NoSyncGuard(NoSyncGuard&& other) noexcept
      : target_(std::exchange(other.target_, nullptr)), previous_(other.previous_) {}
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(NoSyncGuard&&) = delete;
  /// Restores the synchronisation setting the scope found.
  ~NoSyncGuard() {
    if (target_) target_->set_sync_enabled(previous_);
  }

 private:
  GradientSync* target_;
  bool previous_;
};

/// The batch size of a forward call, as the wrappers count it for the monitor: size(0) of the
/// first argument when that is a tensor with a dimension, else -1 (not counted).
inline int64_t leading_batch_size() { return -1; }
/// See leading_batch_size().
template <typename First, typename... Rest>
int64_t leading_batch_size(const First& first, const Rest&...) {
  if constexpr (std::is_convertible_v<const First&, const at::Tensor&>) {
    const at::Tensor& t = first;
    return t.defined() && t.dim() > 0 ? t.size(0) : -1;
  } else {
    return -1;
  }
}

}  // namespace cohort
