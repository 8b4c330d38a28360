// cohort/distributed_data_parallel.h — data parallelism for any torch::nn::Module.
//
//   auto model = cohort::DistributedDataParallel(Net(), ctx);
//   auto loss = torch::nll_loss(model->forward(x), y);
//   loss.backward();        // gradients are averaged over the world before backward returns
//   optimizer.step();
//
// At construction every rank checks that all ranks hold the same parameter and buffer names,
// shapes and dtypes (a mismatch is a ConfigError on every rank, not a hang), then takes rank 0's
// values. During backward, gradients go into buckets (after the first step each gradient shares
// storage with its bucket, so nothing is copied; bucket_cap_mb, filled in reverse
// registration order as in PyTorch's DDP, each closed once it reaches its cap, the first's 1 MiB so
// communication starts early); a bucket's asynchronous allreduce is launched from the autograd hook of its last
// gradient, in bucket order on every rank, so communication overlaps the rest of backward. When
// backward ends, buckets that are not complete (parameters without a gradient this iteration)
// are completed with zeros and launched; all are waited for and the averages written back before
// backward returns. A parameter no rank used keeps its gradient as it was.
//
// For cohort::monitor() (cohort/monitor.h), forward marks where the step's forward and backward
// phases begin and counts the batch's samples; the reducer marks the end of backward and of the
// communication, and computes the averaged gradients' norm (docs/monitoring.md).
//
// Not here: sharding the optimizer state or parameters (sharded_data_parallel.h), mixed precision.
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
class CommHook;

/// How DDP sums a bucket over the ranks (docs/communication.md).
enum class AllreduceAlgo {
  /// hierarchical where the job has several nodes with several ranks each (and shared memory),
  /// flat otherwise — the same choice on every rank.
  automatic,
  /// One collective over every rank (shared memory when they all share a machine, else Gloo).
  flat,
  /// Reduce-scatter inside each node through shared memory, allreduce between nodes (one Gloo
  /// group per local rank), allgather inside the node. A ConfigError where the job cannot.
  hierarchical,
};

/// Settings of DistributedDataParallel.
struct DDPOptions {
  /// Bucket size in MiB: a bucket closes with the gradient that brings it to this size or past it
  /// (PyTorch's rule). A tiny value puts every parameter in its own bucket.
  double bucket_cap_mb = 25.0;
  /// Capacity of the first bucket (the last parameters), so that communication starts early.
  double first_bucket_cap_mb = 1.0;
  /// Broadcast buffers (e.g. batch-norm statistics) from rank 0 before each forward in training.
  bool broadcast_buffers = true;
  /// The yardstick: after backward, one blocking allreduce per gradient, no buckets, no overlap.
  bool reference_mode = false;
  /// How a bucket is averaged (cohort/comm_hook.h: fp16, bf16, PowerSGD or your own); null: the
  /// built-in allreduce. Every rank must pass the same hook with the same settings.
  std::shared_ptr<CommHook> comm_hook;
  /// For CPU buckets (float and double; a hook's 16-bit tensors go flat).
  AllreduceAlgo allreduce = AllreduceAlgo::automatic;
};

/// Counters for tests and monitoring (cumulative since construction).
struct DDPStats {
  int64_t sync_iterations = 0;               ///< backward passes whose gradients were averaged
  int64_t buckets_launched_in_backward = 0;  ///< from a gradient hook, while backward was running
  int64_t buckets_launched_at_end = 0;       ///< when backward had finished (incomplete buckets)
  int64_t bytes_allreduced = 0;              ///< gradient bytes averaged (before a hook compresses them)
  int64_t bytes_on_wire = 0;                 ///< bytes of the collectives that averaged them
  int64_t num_buckets = 0;                   ///< buckets the gradients are grouped into (0 in reference mode)
  bool hierarchical = false;                 ///< buckets go inside nodes, then between them
};

namespace detail {
class DataParallelCore;  // the implementation (src/parallel/ddp/data_parallel_core.h)
}

/// What DistributedDataParallel does independently of the wrapped module's type: the model check,
/// broadcasts, gradient buckets and hooks (implemented in the library).
class DataParallelBase : public GradientSync, public RankStateCheckpointable {
 public:
  ~DataParallelBase() override;
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  /// Gradient accumulation: backward passes inside the returned guard's scope keep gradients local.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(this); }
  bool sync_enabled() const override;
  void set_sync_enabled(bool enabled) override;
  /// Debug check: throws cohort::Error naming the ranks whose parameters differ from rank 0's.
  void assert_in_sync() const;
  /// Counters since construction.
  DDPStats stats() const;
  /// Bucket layout: for each bucket, the names of its parameters (for tests and diagnostics).
  std::vector<std::vector<std::string>> bucket_layout() const;
  /// The comm hook's state (CommHook::state()), which checkpoints keep per rank.
  RankState rank_state() override;
  /// Gives the comm hook its saved state (CommHook::load_state()).
  void load_rank_state(const RankState& saved, bool same_world) override;

 protected:
  /// Checks the model against the other ranks' and takes rank 0's values (collective).
  DataParallelBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, DDPOptions options);
  /// Before the wrapped module's forward: buffers broadcast from rank 0 (if enabled).
  void before_forward();
  /// The monitor's phase marks around a forward; `samples` is the batch size (-1: none). begin
  /// returns whether it marked (a training forward), which end takes back.
  bool forward_begin(int64_t samples);
  /// After the wrapped module's forward: marks where backward begins if `marked` (begin's result).
  void forward_end(bool marked);

 private:
  std::unique_ptr<detail::DataParallelCore> core_;
};

/// The module: `DistributedDataParallel(module, ctx)` gives the holder below.
template <typename ModuleHolder>
class DistributedDataParallelImpl : public torch::nn::Module, public DataParallelBase {
 public:
  /// Wraps `module` for the job `ctx` and registers it as the child "module". Collective: checks
  /// the model against the other ranks' (a ConfigError on every rank for a mismatch) and takes
  /// rank 0's values.
  DistributedDataParallelImpl(ModuleHolder module, std::shared_ptr<Context> ctx, DDPOptions options = {})
      : DataParallelBase(module.ptr(), std::move(ctx), std::move(options)),
        module_(register_module("module", std::move(module))) {}

  /// Calls the wrapped module's forward (after broadcasting buffers, if enabled).
  template <typename... Args>
  decltype(auto) forward(Args&&... args) {
    const bool marked = forward_begin(leading_batch_size(args...));  // monitor: forward begins
    before_forward();
    decltype(auto) out = module_->forward(std::forward<Args>(args)...);
    forward_end(marked);  // monitor: backward (with the loss) begins
    return out;
  }

  /// The wrapped module, e.g. to save it without the "module." prefix.
  ModuleHolder& module() { return module_; }

 private:
  ModuleHolder module_;
};

/// Holder in libtorch's style: `model->forward(x)`, `model->parameters()`.
template <typename ModuleHolder>
class DistributedDataParallel : public torch::nn::ModuleHolder<DistributedDataParallelImpl<ModuleHolder>> {
 public:
  using torch::nn::ModuleHolder<DistributedDataParallelImpl<ModuleHolder>>::ModuleHolder;
};

/// Deduces the wrapped holder's type: `DistributedDataParallel(Net(), ctx, options)`.
template <typename ModuleHolder, typename... Rest>
DistributedDataParallel(ModuleHolder, Rest...) -> DistributedDataParallel<ModuleHolder>;

}  // namespace cohort
