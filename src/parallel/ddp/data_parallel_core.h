// DataParallelCore: what DataParallelBase (cohort/distributed_data_parallel.h) forwards to; the
// module-type-independent part of DistributedDataParallel. Implemented in distributed_data_parallel.cpp.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/distributed_data_parallel.h"

namespace cohort::detail {

/// The type-independent part of DistributedDataParallel: model check, broadcasts, gradient
/// buckets and hooks. Implemented in src/parallel/.
class DataParallelCore {
 public:
  DataParallelCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, DDPOptions options);
  ~DataParallelCore();
  void before_forward();
  /// The monitor's phase marks (cohort/monitor.h) around a forward; `samples` is the batch
  /// dimension of the first tensor argument (-1: none). begin returns whether it marked (a
  /// training forward), which end takes back.
  bool forward_begin(int64_t samples);
  void forward_end(bool marked);
  void set_sync(bool enabled);
  bool sync_enabled() const;
  DDPStats stats() const;
  /// Bucket layout: for each bucket, the names of its parameters (for tests and diagnostics).
  std::vector<std::vector<std::string>> bucket_layout() const;
  void assert_in_sync() const;
  /// The comm hook's state for checkpoints, and back (DataParallelBase's RankStateCheckpointable).
  RankState hook_state() const;
  void load_hook_state(const RankState& saved, bool same_world);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::detail
