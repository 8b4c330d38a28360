// In-memory snapshots (snapshots.h, docs/checkpointing.md): an inner Checkpointer that saves
// into the job's directory in tmpfs every snapshot_every_steps steps.
#include "checkpoint/agreement.h"
#include "checkpoint/checkpointer_impl.h"
#include "checkpoint/format/program_identity.h"
#include "checkpoint/snapshots/snapshots.h"
#include "cohort/error.h"
#include "cohort/mesh_checkpoint.h"
#include "cohort/sharded_state.h"
#include "runtime/log.h"

namespace cohort {
// The ranks agree that every one has a snapshot directory (`dir`, empty where this one has none)
// and count the machines: collectives, made by the constructor and again after a rejoin.
// Returns the number of machines, 0 when some rank has no snapshot directory.
int64_t Checkpointer::Impl::agree_on_snapshots(const std::string& dir, const std::string& why_none) {
  if (ckpt::allreduce_int(ctx_, dir.empty() ? 0 : 1, c10d::ReduceOp::MIN) == 0) {
    if (rank_ == 0)
      detail::log(detail::LogLevel::info, "no in-memory snapshots: " +
                                              (why_none.empty() ? "another rank has no snapshot directory" : why_none));
    return 0;
  }
  // Each machine keeps a whole copy: its first rank writes the replicated files (the same bytes
  // on every rank) and rank 0's manifest, so that losing a machine loses no snapshot.
  return ckpt::allreduce_int(ctx_, ctx_.local_rank() == 0 ? 1 : 0, c10d::ReduceOp::SUM);
}

void Checkpointer::Impl::open_snapshots() {
  const int64_t every = owner_.options_.snapshot_every_steps;
  if (every <= 0) return;
  std::string why_none;
  std::string dir = ckpt::snapshot_dir_for(owner_.options_.snapshot_dir, owner_.dir_, &why_none);
  const int64_t machines = agree_on_snapshots(dir, why_none);
  if (machines == 0) return;
  CheckpointOptions options;
  options.keep_last = 2;  // the newest is being written while the one before stays whole
  options.commit_timeout = owner_.options_.commit_timeout;
  snapshots_ = std::make_unique<Checkpointer>(std::move(dir), owner_.ctx_, options);
  Impl& inner = *snapshots_->impl_;
  inner.is_snapshots_ = true;
  inner.program_ = ckpt::program_identity(rank_);
  inner.writes_replicated_ = rank_ == 0 || ctx_.local_rank() == 0;
  inner.other_copies_ = machines - 1;
  inner.split_replicated_ = machines == 1 && ctx_.world_size() > 1;
  // State held per rank (shards, a comm hook's) goes to a buddy on another machine too.
  if (machines > 1) inner.buddies_ = ckpt::make_buddies(ctx_);
}

void Checkpointer::Impl::release() {
  abandon_ = true;
  ckpt::abort_exchange(buddies_);  // the writer's wait on a buddy, which the buddy no longer answers
  const std::string e = join();
  abandon_ = false;
  if (!e.empty())
    detail::log(detail::LogLevel::info, std::string(is_snapshots_ ? "the snapshot" : "the checkpoint save") +
                                            " in flight when a peer failed was given up: " + e);
  saves_started_ = 0;  // the replacement counts from 0, under the new generation's keys
  parts_complete_ = -1;
  oldest_done_mark_ = 0;
  buddies_ = {};       // its group is the old generation's
  // A wait given up between the TCPStore's slices (wait_for_keys) may still be answered on this
  // connection later, out of turn: the next generation starts on a new one.
  store_.reset();
}

void Checkpointer::Impl::reconnect() {
  if (owner_.options_.snapshot_every_steps <= 0) return;
  // The constructor's agreements again, as the replacement's constructor makes them now.
  std::string why_none;
  const std::string dir = ckpt::snapshot_dir_for(owner_.options_.snapshot_dir, owner_.dir_, &why_none);
  const int64_t machines = agree_on_snapshots(dir, why_none);
  if ((machines == 0) != (snapshots_ == nullptr) || (snapshots_ && snapshots_->impl_->other_copies_ != machines - 1))
    throw CommError(rank_, "the job re-formed around a replacement that sees other snapshot directories or machines "
                           "than this rank did (" + std::to_string(machines) + " machines)");
  if (machines > 1) snapshots_->impl_->buddies_ = ckpt::make_buddies(ctx_);
}

bool Checkpointer::Impl::per_rank_state_without_buddies(const TrainingState& state) {
  if (snapshots_->impl_->other_copies_ == 0 || snapshots_->impl_->buddies_.active()) return false;
  bool per_rank = dynamic_cast<ShardedCheckpointable*>(state.module) != nullptr ||
                  dynamic_cast<MeshCheckpointable*>(state.module) != nullptr;
  if (auto* own = dynamic_cast<RankStateCheckpointable*>(state.module)) per_rank = per_rank || !own->rank_state().empty();
  if (per_rank && !per_rank_noted_ && rank_ == 0)
    detail::log(detail::LogLevel::info, "no in-memory snapshots: the model keeps state per rank (shards, a comm "
                                        "hook's), and no buddy machine can keep a copy of it (machines with unequal "
                                        "numbers of ranks, or no Gloo in this build)");
  per_rank_noted_ = per_rank_noted_ || per_rank;
  return per_rank;
}

void Checkpointer::Impl::maybe_snapshot(const TrainingState& state) {
  if (!snapshots_ || owner_.step_ % owner_.options_.snapshot_every_steps != 0) return;
  if (per_rank_state_without_buddies(state)) return;
  // The previous snapshot's failure is reported here, and this step's snapshot is still taken
  // (save_async would give it up for the other's error).
  wait_for_snapshot();
  snapshots_->step_ = owner_.step_;
  snapshots_->metadata_ = owner_.metadata_;
  try {
    snapshots_->save_async(state);
  } catch (const CommError&) {
    throw;  // the job re-forms around a replaced peer (wait_previous_snapshot): this step does not count
  } catch (const std::exception& e) {
    // The previous snapshot given up because a peer failed (its part never came): a step counted
    // after it would be a second step lost (local SGD trains on between synchronisations).
    stop_if_job_reforms(ctx_.generation());
    detail::log_warn(std::string("in-memory snapshot failed (training continues): ") + e.what());
  }
}

std::string Checkpointer::Impl::copy_to_buddies(const SaveJob& job, const std::string& path,
                                                const std::vector<ckpt::ManifestFile>& files) {
  std::vector<ckpt::ManifestFile> own;
  for (const auto& f : files)
    if (f.role == "shard" || f.role == "rank_state") own.push_back(f);
  return ckpt::exchange_with_buddies(buddies_, path, own, rank_, job.index);
}

void Checkpointer::Impl::wait_for_snapshot() {
  if (!snapshots_) return;
  const std::string e = snapshots_->impl_->join();
  if (e.empty()) return;
  stop_if_job_reforms(ctx_.generation());  // as maybe_snapshot: the last step's snapshot, given up
  detail::log_warn("in-memory snapshot failed (training continues): " + e);
}

}  // namespace cohort
