// ShardedCore's state, shared by its two source files: sharded_core.cpp (construction, forward,
// backward hooks, reductions) and sharded_state_io.cpp (checkpoint shards, full state). Internal.
//
// Per iteration (synchronised backward), unit u goes through:
//   gather   (level 3: before its forward and again before its backward; levels 1, 2: at the next
//            forward after its shard changed) — an allgather submitted to the CommQueue;
//   grads    its parameters' AccumulateGrad post-hooks count down; when all fired, the gradients are
//            flattened into a padded buffer, the parameters' own gradients dropped, and (level 3)
//            the unit's parameters released;
//   reduce   strictly in reverse unit order (the same on every rank): allreduce (level 1) or
//            reduce-scatter (levels 2, 3) on the CommQueue, added into the shard's gradient, while
//            backward goes on;
//   finish   an autograd-engine callback at the end of backward reduces incomplete units (missing
//            gradients count as zeros), waits for every reduction and releases what is gathered.
#pragma once

#include <torch/torch.h>

#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "cohort/context.h"
#include "parallel/comm_queue.h"
#include "flat_unit.h"
#include "sharded_core.h"
#include "monitor/worker_monitor.h"
#include "shard_collectives.h"
#include "unit_plan.h"

namespace cohort::detail {

struct ShardedCore::Impl : std::enable_shared_from_this<Impl>, ShardedCheckpointable {
  struct UnitState {
    std::shared_future<void> gather;  // valid while a gather is in flight or not yet waited for
    bool gather_pending = false;
    size_t fired = 0;                 // parameters whose gradient arrived in this backward
    bool ready = false;               // all gradients in (or completed at the end)
    std::shared_future<void> reduction;
    torch::Tensor grad_full;          // level 1: the full gradient buffer, kept; its shard's part averaged
  };
  struct Slot {
    size_t unit = 0, index = 0;
    bool fired = false;
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t hook_key = 0;
  };

  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Context> ctx;
  ShardedOptions options;
  int rank = 0, world = 1;
  bool level3 = false;
  UnitPlan plan;
  std::vector<int> child_unit;  // per Sequential child: its unit, or -1
  std::vector<std::unique_ptr<FlatUnit>> units;
  std::vector<torch::Tensor> shards;
  std::vector<std::pair<std::string, torch::Tensor>> replicated;  // buffers and frozen parameters
  std::unique_ptr<ShardCollectives> coll;
  std::vector<UnitState> state;
  std::vector<Slot> slots;  // one per trainable parameter, in unit order
  std::unique_ptr<CommQueue> queue;  // declared last: destroyed first, before what its tasks use

  std::recursive_mutex mu;
  bool sync = true;
  bool in_backward = false;
  int next_reduce = -1;  // the unit whose reduction is launched next (counts down)
  // Reductions submitted and not yet known to be done, oldest first. Backward produces gradients
  // faster than they can be reduced; without a bound every unit's flat gradient would wait in the
  // queue at once (a full model's worth of memory), so launch() waits for the oldest beyond this.
  std::deque<size_t> in_flight;
  static constexpr size_t kMaxInFlight = 2;
  ShardedStats stats;
  StepMonitor* monitor = nullptr;  // the one current at construction (cohort/monitor.h)

  // Survivors keep running (cohort/keep_running.h). What the constructor does with the other ranks
  // — the same-model check and rank 0's values to all — is done again at a rejoin, meeting the
  // replacement's constructor: with the signature kept from construction (the parameters are
  // flattened since) and placeholders of the original shapes, whose received values are dropped.
  // A lost rank's shard (and its optimizer state) exists only in its snapshots, so after a rejoin,
  // and on a replacement, the state must be restored before the next forward.
  std::string signature;
  std::vector<torch::Tensor> placeholders;
  bool needs_restore = false;
  int64_t rejoin_listener = -1;

  ~Impl() override;
  void connect(const std::vector<torch::Tensor>& values, bool write_back);
  void let_go();     // before a rejoin: the old groups' collectives end, their users go
  void reconnect();  // after it
  void require_state() const;
  void attach_hooks();
  void broadcast_buffers();
  // Gathers (caller's thread submits; the CommQueue runs them).
  void request_gather(size_t u);
  void ensure_gathered(size_t u);
  void release(size_t u);
  void wait(std::shared_future<void>& f);
  // Backward.
  void begin_iteration();
  void pre_backward(size_t u);
  void on_grad_ready(size_t slot);
  void unit_grads_done(size_t u);
  void launch_ready();
  void launch(size_t u);
  void finish_iteration();
  void reset_iteration();

  // ShardedCheckpointable (sharded_state_io.cpp).
  ShardState shard_state(const torch::optim::Optimizer* optimizer) override;
  NamedTensorList replicated_tensors() override;
  void load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) override;
  FullState full_state(const torch::optim::Optimizer* optimizer) override;
  std::string layout_json(const torch::optim::Optimizer* optimizer) const;
};

}  // namespace cohort::detail
