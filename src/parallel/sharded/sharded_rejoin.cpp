// ShardedCore at a rejoin (survivors keep running, cohort/keep_running.h): what the constructor
// does with the other ranks, done again on the new groups, and what a failed iteration leaves
// behind, dropped. Why the state must be restored afterwards: sharded_core_impl.h.
#include "sharded_core_impl.h"

#include "cohort/error.h"
#include "parallel/ddp/replica_sync.h"
#include "runtime/context_internals.h"

namespace cohort::detail {

void ShardedCore::Impl::connect(const std::vector<torch::Tensor>& values, bool write_back) {
  Context& c = *ctx;
  const auto device = plan.units.front().params.front().device();
  coll = std::make_unique<ShardCollectives>(c.group(device), device.is_cpu() ? ContextInternals::shm_allreduce(c) : nullptr,
                                            rank, world, options.reduce_scatter, options.allgather);
  check_same_signature(c, signature, "", "ShardedDataParallel");
  broadcast_from_rank0(*c.group(device), values, 4 << 20, write_back);  // small chunks: no full-model copy
  queue = std::make_unique<CommQueue>();
}

void ShardedCore::Impl::let_go() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  queue.reset();  // what it still runs fails at once: the old groups' connections are closed
  coll.reset();
  for (auto& st : state) {
    st.gather = {};
    st.gather_pending = false;
    st.reduction = {};
  }
  reset_iteration();
  for (auto& unit : units) {
    // Gradients the failed backward left on the parameters (the optimizer's zero_grad clears only
    // the shards'): the next backward would add to them.
    for (const auto& p : unit->params()) p.param.mutable_grad() = torch::Tensor();
    if (level3) unit->release();  // what the failed iteration left gathered
    unit->stale = true;           // gathered again from the restored shards
  }
}

void ShardedCore::Impl::reconnect() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  connect(placeholders, /*write_back=*/false);
  needs_restore = true;
}

void ShardedCore::Impl::require_state() const {
  if (!needs_restore) return;
  throw ConfigError(rank, "ShardedDataParallel: a peer was replaced, and the shards it held (parameters and optimizer "
                          "state) exist only in its snapshots and checkpoints; restore them (Checkpointer::"
                          "restore_latest, with snapshot_every_steps) before the next forward");
}

}  // namespace cohort::detail
