// runtime/context_internals.h — what cohort's own parts use of a Context beyond its public API.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/context.h"

namespace cohort::detail {

struct ContextInternals {
  /// The shared-memory allreduce for CPU tensors when all ranks share this machine, else nullptr.
  static ShmAllreduce* shm_allreduce(const Context& ctx) { return ctx.shm_.get(); }
  /// A number unique within the job for objects created in the same order on every rank (a DDP
  /// module, a checkpoint), used to keep their store keys apart.
  static int64_t next_sequence(Context& ctx) { return ctx.sequence_++; }
  /// Registers what an object does when the groups are re-formed (Context::rejoin): `release`
  /// drops what it holds of the old groups (so that they close: a rank still waiting on this one
  /// then fails over too), before the new ones form; `reconnect` makes the collectives its
  /// constructor made, in the same order, so that it meets the replacement's constructor.
  /// `what` names the object in messages. Returns the key for remove_rejoin_listener (call it in
  /// the destructor).
  static int64_t add_rejoin_listener(Context& ctx, std::string what, std::function<void()> release,
                                     std::function<void()> reconnect) {
    const int64_t key = ctx.next_listener_++;
    ctx.rejoin_listeners_[key] = {std::move(what), std::move(release), std::move(reconnect)};
    return key;
  }
  /// The store the current generation's groups meet in (subgroups are made there too).
  static c10::intrusive_ptr<c10d::Store> generation_store(const Context& ctx) { return ctx.generation_store(); }
  static void remove_rejoin_listener(Context& ctx, int64_t key) { ctx.rejoin_listeners_.erase(key); }
  /// A subgroup of the current generation: a rejoin abandons it with the world group.
  static void track_subgroup(const Context& ctx, const c10::intrusive_ptr<Backend>& group) {
    std::lock_guard<std::mutex> lock(ctx.subgroups_mutex_);
    ctx.subgroups_.push_back(c10::weak_intrusive_ptr<Backend>(group));
  }
};

/// A Gloo process group over some of the job's ranks (hierarchical allreduce's group of the ranks
/// with the same local rank, the snapshot buddies' group). Every rank of the subgroup calls this
/// with the same `prefix` (unique in the job) and its own `rank` in 0..size-1; it meets in the
/// current generation's store (Context::rejoin). The same network device and timeout as the job's
/// own group. Null where this build has no Gloo. Throws CommError when the members cannot connect.
c10::intrusive_ptr<Backend> make_cpu_subgroup(const Context& ctx, const std::string& prefix, int rank, int size);

}  // namespace cohort::detail
