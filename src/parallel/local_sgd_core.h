// LocalSGDCore: what LocalSGDBase (cohort/local_sgd.h) forwards to. Implemented in local_sgd.cpp.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/local_sgd.h"
#include "monitor/worker_monitor.h"           // StepMonitor
#include "parallel/comm_hooks/hook_comm.h"    // GroupHookComm
#include "parallel/ddp/replica_sync.h"        // NamedTensor

namespace cohort::detail {

/// The type-independent part of LocalSGD. Implemented in src/parallel/local_sgd.cpp. Its state is
/// its own (no Impl behind it): this header is private.
class LocalSGDCore final : public ShardedCheckpointable {
 public:
  LocalSGDCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx, LocalSGDOptions options);
  ~LocalSGDCore() override;
  LocalSGDCore(const LocalSGDCore&) = delete;  // the rejoin listener holds `this`
  LocalSGDCore& operator=(const LocalSGDCore&) = delete;
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
  // Everything the constructor does with the other ranks, in order: the same-model check, rank 0's
  // state to all (and the outer optimizer's start from it), the communicator. After a rejoin
  // (keep_running.h) the survivors do it again, meeting the replacement's constructor; the loop
  // then restores every rank's own state from the snapshot.
  void connect();
  std::vector<torch::Tensor> views_of(const torch::Tensor& flat) const;  // per parameter
  void synchronise();

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Context> ctx_;
  LocalSGDOptions options_;
  int rank_ = 0, world_ = 1;
  std::vector<std::string> param_names_, buffer_names_;  // "module.<name>", as DDP's checkpoints
  std::vector<torch::Tensor> params_, buffers_;
  std::vector<torch::Tensor> averaged_buffers_;  // the floating ones, of the parameters' dtype
  int64_t param_numel_ = 0;
  // nesterov: the parameters after the last synchronisation, and the outer momentum (flat, with
  // per-parameter views for checkpoints).
  torch::Tensor anchor_, momentum_;
  std::vector<torch::Tensor> anchor_views_, momentum_views_;
  torch::Tensor steps_ = torch::zeros({}, torch::kLong);  // 0-d: a checkpoint's replicated tensor
  std::unique_ptr<GroupHookComm> comm_;
  StepMonitor* monitor_ = nullptr;
  int64_t syncs_ = 0;
  std::vector<NamedTensor> named_;  // parameters and buffers, for the same-model check
  int64_t rejoin_listener_ = -1;
};

}  // namespace cohort::detail
