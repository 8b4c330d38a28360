// cohort/local_sgd.h — local SGD and DiLoCo: every rank trains on its own for H steps, then the
// ranks synchronise their parameters once. For slow links: one exchange of the parameters every H
// steps instead of one of the gradients every step.
//
//   cohort::LocalSGDOptions options;
//   options.sync_every = 20;
//   options.outer = cohort::OuterOptimizer::nesterov;
//   auto model = cohort::LocalSGD(Net(), ctx, options);
//   torch::optim::AdamW inner(model->parameters(), torch::optim::AdamWOptions(1e-3));
//   for (auto& batch : *loader) {
//     inner.zero_grad();
//     torch::nll_loss(model->forward(batch.data), batch.target).backward();  // no communication
//     inner.step();
//     model->step();  // counts the local step; every sync_every-th one synchronises
//   }
//
// At construction the ranks check that they hold the same model and the same settings (a mismatch
// is a ConfigError on every rank) and take rank 0's values. A synchronisation averages the
// parameters over the ranks (one allreduce of all of them, bitwise the same result on every rank),
// and then, by `outer`:
//   average   the parameters become the average (local SGD / post-local SGD);
//   nesterov  DiLoCo (Douillard et al., 2023): the outer gradient is the anchor (the parameters
//             after the previous synchronisation) minus the average; an SGD step with Nesterov
//             momentum on it, as torch.optim.SGD(nesterov=True) takes it, moves the anchor, and the
//             parameters become the new anchor.
// Floating-point buffers (batch-norm statistics) are averaged too, so after a synchronisation every
// rank holds bitwise the same model. The inner optimizer's state stays each rank's own.
//
// Checkpoints (cohort/checkpointer.h): the model is a ShardedCheckpointable, so every rank writes
// its own parameters, buffers and inner optimizer state (they differ between synchronisations),
// rank 0 the anchor, the outer momentum and the step count; a restore on the same world size
// continues bitwise. On another world size rank r takes saved rank r mod W's state.
//
// Memory: nesterov keeps two copies of the parameters (anchor and momentum), average none; a
// synchronisation uses one flat buffer of the parameters and floating buffers.
// Not here: parameters of several dtypes or devices, overlapping the synchronisation with compute.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/module_wrapper.h"
#include "cohort/sharded_state.h"

namespace cohort {

class Context;

/// What a synchronisation does with the averaged parameters: `average` takes them (local SGD);
/// `nesterov` moves the anchor by an SGD step with Nesterov momentum on anchor minus average and
/// takes the new anchor (DiLoCo).
enum class OuterOptimizer { average, nesterov };

/// Settings of LocalSGD; construction checks that every rank has the same.
struct LocalSGDOptions {
  /// H: local steps between synchronisations (at least 1; 1 averages the parameters every step).
  int64_t sync_every = 20;
  /// What a synchronisation does with the averaged parameters.
  OuterOptimizer outer = OuterOptimizer::average;
  /// The outer step (nesterov only); DiLoCo's published values.
  double outer_lr = 0.7;
  double outer_momentum = 0.9;  ///< the outer step's momentum, in [0, 1) (nesterov only)
};

/// Counters of LocalSGD (stats()).
struct LocalSGDStats {
  int64_t local_steps = 0;    ///< step() calls, restored with a checkpoint
  int64_t syncs = 0;          ///< synchronisations by this process
  int64_t bytes_on_wire = 0;  ///< bytes this rank allreduced in them
};

namespace detail {
class LocalSGDCore;  // the implementation (src/parallel/local_sgd_core.h)
}

/// What LocalSGD does independently of the wrapped module's type (implemented in the library).
class LocalSGDBase : public ShardedCheckpointable {
 public:
  ~LocalSGDBase() override;
  LocalSGDBase(const LocalSGDBase&) = delete;
  LocalSGDBase& operator=(const LocalSGDBase&) = delete;

  /// After the inner optimizer's step: counts it, and synchronises (collectively) when the count
  /// is a multiple of sync_every. Returns whether it synchronised.
  bool step();
  /// Synchronises now (collective); does not count a step. With nesterov every call is an outer step.
  void sync();
  /// At the end of training (collective): synchronises the local steps since the last
  /// synchronisation, if the step count is not a multiple of sync_every, so that every rank ends
  /// with the same model. Returns whether it synchronised.
  bool finish();
  /// For loops written for DDP's gradient accumulation: local steps never communicate, so this
  /// guard does nothing.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(nullptr); }
  /// Counters (local steps, synchronisations, bytes).
  LocalSGDStats stats() const;

  // ShardedCheckpointable: the Checkpointer finds it through the module it is given.
  ShardState shard_state(const torch::optim::Optimizer* optimizer) override;
  NamedTensorList replicated_tensors() override;
  void load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) override;
  FullState full_state(const torch::optim::Optimizer* optimizer) override;

 protected:
  /// Checks the model against the other ranks' and takes rank 0's values (collective).
  LocalSGDBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, LocalSGDOptions options);
  /// The monitor's phase marks around a forward (as DataParallelBase's).
  bool forward_begin(int64_t samples);
  /// After the wrapped module's forward: marks where backward begins if `marked` (begin's result).
  void forward_end(bool marked);

 private:
  std::unique_ptr<detail::LocalSGDCore> core_;
};

/// The module: `LocalSGD(module, ctx, options)` gives the holder below.
template <typename ModuleHolder>
class LocalSGDImpl : public torch::nn::Module, public LocalSGDBase {
 public:
  /// Wraps `module` for the job `ctx` and registers it as the child "module". Collective: checks
  /// the model and the settings against the other ranks' (a ConfigError on every rank for a
  /// mismatch) and takes rank 0's values.
  LocalSGDImpl(ModuleHolder module, std::shared_ptr<Context> ctx, LocalSGDOptions options = {})
      : LocalSGDBase(module.ptr(), std::move(ctx), options), module_(register_module("module", std::move(module))) {}

  /// The wrapped module's forward (no communication).
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    const bool marked = forward_begin(leading_batch_size(args...));  // monitor: forward begins
    decltype(auto) out = module_->forward(std::forward<Args>(args)...);
    forward_end(marked);  // monitor: backward begins
    return out;
  }

  /// The wrapped module.
  ModuleHolder& module() { return module_; }

 private:
  ModuleHolder module_;
};

/// Holder in libtorch's style: `model->forward(x)`, `model->step()`.
template <typename ModuleHolder>
class LocalSGD : public torch::nn::ModuleHolder<LocalSGDImpl<ModuleHolder>> {
 public:
  using torch::nn::ModuleHolder<LocalSGDImpl<ModuleHolder>>::ModuleHolder;
};

/// Deduces the wrapped holder's type: `LocalSGD(Net(), ctx, options)`.
template <typename ModuleHolder, typename... Rest>
LocalSGD(ModuleHolder, Rest...) -> LocalSGD<ModuleHolder>;

}  // namespace cohort
