// cohort/sharded_data_parallel.h — sharded data parallelism (ZeRO-1/2/3, FSDP) for libtorch modules.
//
//   cohort::ShardedOptions options;
//   options.level = cohort::ShardingLevel::parameters;
//   auto model = cohort::ShardedDataParallel(net, ctx, options);
//   torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));  // the shards
//   optimizer.zero_grad();
//   auto loss = torch::nll_loss(model->forward(x), y);
//   loss.backward();        // gradients averaged over the world, each rank keeps its shard's part
//   model->clip_grad_norm(1.0);  // optional: the global norm, over all shards
//   optimizer.step();       // each rank updates its shard; the next forward gathers what it needs
//
// The trainable parameters are grouped into units (consecutive parameters). A unit is one flat
// buffer of all its parameters, padded to a multiple of the world size W, and rank r owns the r-th
// 1/W of it: its *shard*, a leaf tensor that `parameters()` returns and the optimizer updates, so
// the optimizer's state exists only for the shard. Levels (docs/sharded.md has the memory sheet):
//   optimizer_state (ZeRO-1): full parameters and a full gradient buffer per unit on every rank;
//       each unit's gradients are reduce-scattered (launched from backward hooks) so that the
//       shard's part of the buffer holds the average, and the shard's gradient is that slice. Only
//       the slice is read; the rest of the buffer is averaged too only where the reduce-scatter is
//       an allreduce (allreduce_slice: the default on one machine).
//   gradients (ZeRO-2): a unit's gradients are reduce-scattered as soon as backward produced them;
//       a rank keeps only its shard's gradient.
//   parameters (ZeRO-3 / FSDP): only the shard persists. A unit's parameters are gathered just before
//       its forward and again before its backward, and freed right after; its gradients are
//       reduce-scattered, overlapped with the backward of the units before it.
// Updated shards are gathered again lazily, at the next forward after a synchronised backward
// (or after a shard changed in place).
//
// libtorch C++ modules have no forward hooks, so for level 3 the wrapper itself must call each
// unit: wrap a torch::nn::Sequential (units are its children, by name; default: one unit per child
// that has parameters). Any other module is one unit at level 3. Levels 1 and 2 take any module;
// units there are groups of about unit_cap_mb, or named submodules.
// Not here: mixed precision, CPU offload, parameters on several devices or of several dtypes.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cohort/module_wrapper.h"
#include "cohort/sharded_state.h"

namespace cohort {

class Context;

/// What ShardedDataParallel shards: the optimizer state (ZeRO-1), the gradients too (ZeRO-2), or
/// the parameters too (ZeRO-3 / FSDP).
enum class ShardingLevel { optimizer_state = 1, gradients = 2, parameters = 3 };

/// How a unit's gradients are reduce-scattered (all levels: level 1 needs only its shard's part of
/// the averaged gradient too). docs/sharded.md has measurements.
enum class ReduceScatterAlgo {
  automatic,        ///< native where the backend has it (NCCL), else shm (ranks on one machine), else ring
  ring,             ///< W-1 steps of send/recv around a ring: (W-1)/W of the bytes per rank
  allreduce_slice,  ///< allreduce of the whole unit, keep the own slice (shared memory when available)
  native,           ///< the backend's reduce_scatter (NCCL); a ConfigError where there is none
  shm,              ///< shared memory: every rank's pieces in, the own part summed straight out
};

/// How updated shards are gathered into full units.
enum class AllgatherAlgo {
  automatic,      ///< shm when all ranks are on one machine, else the backend's allgather
  backend,        ///< the process group's allgather
  shm_allreduce,  ///< each rank writes its shard into a zeroed unit; a shared-memory sum gathers them
  shm,            ///< each rank copies its shard into shared memory and the others' shards out of it
};

/// Settings of ShardedDataParallel (docs/sharded.md).
struct ShardedOptions {
  /// What is sharded.
  ShardingLevel level = ShardingLevel::parameters;
  /// Units by submodule name (as named_modules() gives them, without the wrapper's prefix): each
  /// entry is one unit, of the parameters under those submodules. At level 3 the module must be a
  /// torch::nn::Sequential and the names its children, consecutive. Empty: the default units.
  std::vector<std::vector<std::string>> units;
  /// Default units at levels 1 and 2 (and for a Sequential's children, never split): about this many MiB.
  double unit_cap_mb = 25.0;
  /// How a unit's gradients are reduce-scattered.
  ReduceScatterAlgo reduce_scatter = ReduceScatterAlgo::automatic;
  /// How updated shards are gathered into full units.
  AllgatherAlgo allgather = AllgatherAlgo::automatic;
  /// Level 3: gather the next unit while the current one computes (forward and backward).
  bool prefetch = true;
  /// Level 3 on a Sequential: children (by name) whose unit, once gathered for its forward, stays
  /// gathered until the end of the forward (without autograd) or of its own backward — for a
  /// parameter a later child uses too, such as a token embedding tied to the output head (as
  /// FSDP2's reshard_after_forward=False on that module). Costs the unit's full size meanwhile.
  std::vector<std::string> keep_gathered;
  /// Broadcast buffers (batch-norm statistics) from rank 0 before each forward in training.
  bool broadcast_buffers = true;
};

/// Counters for tests, monitoring and the benchmark (cumulative since construction).
struct ShardedStats {
  int64_t sync_iterations = 0;     ///< backward passes whose gradients were reduced
  int64_t num_units = 0;           ///< units the trainable parameters are grouped into
  int64_t unit_gathers = 0;        ///< units gathered (forward, backward, after a step)
  int64_t bytes_gathered = 0;      ///< full-unit bytes produced by gathers, per rank
  int64_t bytes_reduced = 0;       ///< full-unit gradient bytes reduced (allreduce or reduce-scatter)
  int64_t reductions_in_backward = 0;  ///< reductions launched from a gradient hook during backward
  int64_t max_units_gathered = 0;  ///< most units held full at one time (level 3)
};

namespace detail {
class ShardedCore;  // the implementation (src/parallel/sharded/sharded_core.h)
}

/// What ShardedDataParallel does independently of the wrapped module's type: units, shards,
/// gathers and reductions, its checkpoint side (implemented in the library).
class ShardedBase : public GradientSync, public ShardedCheckpointable {
 public:
  ~ShardedBase() override;
  ShardedBase(const ShardedBase&) = delete;
  ShardedBase& operator=(const ShardedBase&) = delete;

  /// Gradient accumulation: backward passes inside the returned guard's scope accumulate full
  /// gradients locally (costing their full size meanwhile); the next one outside reduces the sums.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(this); }
  bool sync_enabled() const override;
  void set_sync_enabled(bool enabled) override;
  /// Scales the shards' gradients so that the norm over all ranks' shards is at most max_norm;
  /// returns that total norm (collective: every rank calls it).
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  /// For each shard (in parameters() order), a 0/1 tensor of its size: 1 where the element belongs
  /// to a parameter that `select(name, sizes)` picks. Per-parameter choices on flat shards, e.g.
  /// weight decay on matrices only: shard.addcmul_(shard, mask, -lr * wd) before the step.
  std::vector<torch::Tensor> shard_masks(const std::function<bool(const std::string&, c10::IntArrayRef)>& select) const;
  /// Counters since construction.
  ShardedStats stats() const;
  /// For each unit, the names of its parameters.
  std::vector<std::vector<std::string>> unit_layout() const;

  // ShardedCheckpointable: the Checkpointer finds it through the module it is given.
  ShardState shard_state(const torch::optim::Optimizer* optimizer) override;
  NamedTensorList replicated_tensors() override;
  void load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) override;
  FullState full_state(const torch::optim::Optimizer* optimizer) override;

 protected:
  /// Plans the units, checks the model against the other ranks', shards it (collective).
  ShardedBase(std::shared_ptr<torch::nn::Module> module, bool is_sequential, std::shared_ptr<Context> ctx,
              ShardedOptions options);
  /// Rank r's shard of every unit, in unit order (leaf tensors requiring grad).
  const std::vector<torch::Tensor>& shards() const;
  /// Before the wrapped module's forward: buffers broadcast, updated shards gathered.
  void before_forward();
  /// Level 3 on a Sequential: whether forward runs its children unit by unit, and doing it.
  bool runs_units() const;
  /// Runs `x` through the children, each unit gathered for its children's forward.
  torch::Tensor forward_sequential(torch::Tensor x);
  /// Level 3 with one unit: after the module's forward (frees the unit once backward is done).
  void after_forward();
  /// The monitor's phase marks around a forward (as DataParallelBase's).
  bool forward_begin(int64_t samples);
  /// After the wrapped module's forward: marks where backward begins if `marked` (begin's result).
  void forward_end(bool marked);

 private:
  std::unique_ptr<detail::ShardedCore> core_;
};

/// The wrapper. Its registered parameters are the shards ("unit_<k>_shard"), so
/// `model->parameters()` — what the optimizer takes — is this rank's shards; the wrapped module is
/// `model->module()` (its parameters are full only while gathered: at level 3, between forward and
/// backward of their unit).
template <typename ModuleHolder>
class ShardedDataParallelImpl : public torch::nn::Module, public ShardedBase {
 public:
  /// Whether the wrapped module is a torch::nn::Sequential (level 3 can then run it unit by unit).
  static constexpr bool kSequential = std::is_same_v<ModuleHolder, torch::nn::Sequential>;

  /// Wraps `module` for the job `ctx` and registers this rank's shards as its parameters.
  /// Collective: plans the units, checks the model against the other ranks' (a ConfigError on every
  /// rank for a mismatch) and shards it.
  ShardedDataParallelImpl(ModuleHolder module, std::shared_ptr<Context> ctx, ShardedOptions options = {})
      : ShardedBase(module.ptr(), kSequential, std::move(ctx), std::move(options)), module_(std::move(module)) {
    const auto& own = shards();
    for (size_t k = 0; k < own.size(); ++k) register_parameter("unit_" + std::to_string(k) + "_shard", own[k]);
  }

  /// The wrapped module's forward: unit by unit for a Sequential at level 3.
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    const bool marked = forward_begin(leading_batch_size(args...));  // monitor: forward begins
    if constexpr (kSequential) {
      if (runs_units()) {
        auto out = forward_sequential(std::forward<Args>(args)...);
        forward_end(marked);  // monitor: backward begins
        return out;
      }
    }
    before_forward();
    decltype(auto) out = module_->forward(std::forward<Args>(args)...);
    after_forward();
    forward_end(marked);
    return out;
  }

  /// train()/eval() reach the wrapped module, which is not registered as a child (its parameters
  /// are not this wrapper's).
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    module_->train(on);
  }

  /// The wrapped module.
  ModuleHolder& module() { return module_; }

 private:
  ModuleHolder module_;
};

/// Holder in libtorch's style: `model->forward(x)`, `model->parameters()` (this rank's shards).
template <typename ModuleHolder>
class ShardedDataParallel : public torch::nn::ModuleHolder<ShardedDataParallelImpl<ModuleHolder>> {
 public:
  using torch::nn::ModuleHolder<ShardedDataParallelImpl<ModuleHolder>>::ModuleHolder;
};

/// Deduces the wrapped holder's type: `ShardedDataParallel(net, ctx, options)`.
template <typename ModuleHolder, typename... Rest>
ShardedDataParallel(ModuleHolder, Rest...) -> ShardedDataParallel<ModuleHolder>;

}  // namespace cohort
