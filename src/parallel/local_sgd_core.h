// LocalSGDCore: what LocalSGDBase (cohort/local_sgd.h) forwards to. Implemented in local_sgd.cpp.
#pragma once

#include <torch/nn/module.h>

#include <memory>

#include "cohort/local_sgd.h"

namespace cohort::detail {

/// The type-independent part of LocalSGD. Implemented in src/parallel/local_sgd.cpp.
class LocalSGDCore final : public ShardedCheckpointable {
 public:
  LocalSGDCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, LocalSGDOptions options);
  ~LocalSGDCore() override;
  bool forward_begin(int64_t samples);
  void forward_end(bool marked);
  bool step();
  void sync();
  bool finish();
  LocalSGDStats stats() const;

  ShardState shard_state(const torch::optim::Optimizer* optimizer) override;
  NamedTensorList replicated_tensors() override;
  void load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) override;
  FullState full_state(const torch::optim::Optimizer* optimizer) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::detail
