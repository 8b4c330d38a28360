// ShardedCore: what ShardedBase (cohort/sharded_data_parallel.h) forwards to; the
// module-type-independent part of ShardedDataParallel. Implemented in sharded_core.cpp,
// sharded_state_io.cpp, sharded_rejoin.cpp (its state in sharded_core_impl.h).
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/sharded_data_parallel.h"

namespace cohort::detail {

/// The type-independent part of ShardedDataParallel, behind ShardedBase: each method is the base's
/// of the same name (documented there); checkpointable() is the base's ShardedCheckpointable side.
class ShardedCore {
 public:
  ShardedCore(std::shared_ptr<torch::nn::Module> module, bool is_sequential, std::shared_ptr<Context> ctx,
              ShardedOptions options);
  ~ShardedCore();
  const std::vector<torch::Tensor>& shards() const;
  void before_forward();
  bool runs_units() const;
  torch::Tensor forward_sequential(torch::Tensor x);
  void after_forward();
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
