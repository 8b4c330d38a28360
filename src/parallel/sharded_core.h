// ShardedCore: what ShardedBase (cohort/sharded_data_parallel.h) forwards to; the
// module-type-independent part of ShardedDataParallel. Implemented in sharded_core.cpp,
// sharded_state_io.cpp (its state in sharded_core_impl.h).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/sharded_data_parallel.h"

namespace cohort::detail {

/// The type-independent part of ShardedDataParallel. Implemented in src/parallel/sharded_core.cpp.
class ShardedCore {
 public:
  ShardedCore(std::shared_ptr<torch::nn::Module> module, bool is_sequential, std::shared_ptr<Context> ctx,
              ShardedOptions options);
  ~ShardedCore();
  /// Rank r's shard of every unit, in unit order (leaf tensors requiring grad).
  const std::vector<torch::Tensor>& shards() const;
  /// Before the wrapped module's forward: buffers broadcast, updated shards gathered (levels 1, 2;
  /// level 3 with a single unit).
  void before_forward();
  /// Level 3 on a Sequential: whether forward runs its children unit by unit, and doing it.
  bool runs_units() const;
  torch::Tensor forward_sequential(torch::Tensor x);
  /// Level 3 with one unit: after the module's forward (frees the unit once backward is done).
  void after_forward();
  /// The monitor's phase marks around a forward (see DataParallelCore::forward_begin).
  bool forward_begin(int64_t samples);
  void forward_end(bool marked);
  void set_sync(bool enabled);
  bool sync_enabled() const;
  double clip_grad_norm(double max_norm, double norm_type);
  std::vector<torch::Tensor> shard_masks(const std::function<bool(const std::string&, c10::IntArrayRef)>& select) const;
  ShardedStats stats() const;
  std::vector<std::vector<std::string>> unit_layout() const;
  ShardedCheckpointable& checkpointable();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort::detail
