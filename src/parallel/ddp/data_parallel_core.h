// DataParallelCore: what DataParallelBase (cohort/distributed_data_parallel.h) forwards to; the
// module-type-independent part of DistributedDataParallel. Implemented in distributed_data_parallel.cpp.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/distributed_data_parallel.h"
#include "grad_reducer.h"   // GradReducer and its Param
#include "replica_sync.h"   // NamedTensor

namespace cohort::detail {

/// The type-independent part of DistributedDataParallel: model check, broadcasts, gradient
/// buckets and hooks. Implemented in src/parallel/. Its state is its own (no Impl behind it): this
/// header is private, so GradReducer may show here.
class DataParallelCore {
 public:
  DataParallelCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, DDPOptions options);
  ~DataParallelCore();
  DataParallelCore(const DataParallelCore&) = delete;  // the rejoin listener holds `this`
  DataParallelCore& operator=(const DataParallelCore&) = delete;
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
  // Everything the constructor does with the other ranks, in order: the same-model check, rank 0's
  // state to all, the choice of allreduce, the reducer. After a rejoin (keep_running.h) the
  // survivors do it again, meeting the replacement's constructor.
  void connect();

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Context> ctx_;
  DDPOptions options_;
  std::vector<torch::Tensor> params_;   // all parameters (broadcast, in-sync check)
  std::vector<torch::Tensor> buffers_;
  std::shared_ptr<GradReducer> reducer_;
  std::vector<NamedTensor> named_;              // parameters and buffers, for the same-model check
  std::vector<GradReducer::Param> trainable_;   // what the reducer averages
  StepMonitor* monitor_ = nullptr;  // the one current at construction (cohort/monitor.h)
  int64_t rejoin_listener_ = -1;
  // Names this DDP's keys in the store (the hierarchical allreduce's), taken once at construction:
  // after a rejoin the survivors' connect() must use the number the replacement's constructor
  // takes, and both took it in the same order of construction.
  int64_t sequence_ = 0;
};

}  // namespace cohort::detail
