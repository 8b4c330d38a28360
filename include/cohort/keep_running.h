// cohort/keep_running.h — survivors keep running: a peer's failure costs a replacement and one
// step, not a restart of every worker.
//
//   auto ctx = cohort::init();
//   cohort::CheckpointOptions options;
//   options.snapshot_every_steps = 1;
//   cohort::Checkpointer checkpoints(dir, ctx, options);
//   auto model = cohort::DistributedDataParallel(net, ctx);
//   cohort::keep_running(ctx, [&] {
//     checkpoints.restore_latest(model, optimizer, sampler);  // the newest snapshot after a failure
//     for (...) { ...; optimizer.step(); checkpoints.maybe_save(model, optimizer, sampler); }
//   });
//
// Under `cohort run --keep-survivors`, when a worker dies or hangs the agent starts a replacement
// for its rank alone (a warm spare when it has one) and tells the other workers. Their collectives
// with the lost peer fail within moments (a closed connection, a dead pid on the shared-memory
// path, or the agent killing a hung peer), the error comes out of `body`, and keep_running:
//   1. waits for the agent's word that a replacement is on its way (a few seconds at most:
//      without it the error is the job's, and it is thrown on);
//   2. re-forms the process groups around the replacement (Context::rejoin), and every cohort
//      object made on the Context — Checkpointer, DistributedDataParallel, ShardedDataParallel,
//      LocalSGD — reconnects, making the collectives its constructor made, which the
//      replacement's constructors make now (ShardedDataParallel then trains only once restored:
//      the lost rank's shard is in its snapshot);
//   3. runs `body` again, which restores the newest state every rank has: the in-memory snapshot
//      (Checkpointer snapshots, at most one step old), on the replacement as on the survivors.
// So what `body` needs from before the failure must be restored by it, and collectives of your
// own belong inside it (the replacement meets the survivors only where cohort's objects do).
// cohort::Error other than CommError and TimeoutError (a bad configuration, NaN, a checkpoint
// that does not fit) is thrown on at once; only communication failures wait for a replacement.
#pragma once

#include <functional>
#include <memory>

namespace cohort {

class Context;

/// Settings of keep_running().
struct KeepRunningOptions {
  /// How long a survivor waits for the agent's word of a replacement after a collective failed.
  /// COHORT_REJOIN_WAIT_S overrides it.
  double rejoin_wait_s = 10;
};

/// Runs `body` until it returns, re-forming the job around a replaced peer and running it again
/// after each peer failure the agent repairs (above). Rethrows what is not such a failure.
void keep_running(const std::shared_ptr<Context>& ctx, const std::function<void()>& body,
                  KeepRunningOptions options = {});

/// Times keep_running() re-formed this process's job (peer failures survived).
int rejoins();

}  // namespace cohort
