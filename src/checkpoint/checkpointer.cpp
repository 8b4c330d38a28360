// The Checkpointer: its public calls and save policy (this file); the rest in checkpointer_impl.h
// and the files it names. The file format pieces live in file_io / safetensors / manifest /
// checkpoint_dir.
//
// One save, as every rank sees it (collective: all ranks make the same calls in the same order):
//   1. capture (caller's thread; save_capture.cpp): rank 0 copies the model and optimizer tensors
//      into staging memory kept between saves; every rank records its RNG state.
//   2. write (background thread for async saves; save_write.cpp): rank 0 writes model.safetensors
//      and optimizer.safetensors into DIR/step-N/ (atomic writer: temporary name, fsync, rename).
//   3. report (save_commit.cpp): every rank puts its part (RNG state, files it wrote, or its error)
//      under a store key for this save.
//   4. commit (rank 0; save_commit.cpp): waits for every rank's part, writes manifest.json
//      atomically, fsyncs the directory; then retention removes old checkpoints.
// Only rank 0 touches the disk for replicated state, so the other ranks' saves cost a few
// microseconds. Sharded state (a module that is a ShardedCheckpointable, i.e. ShardedDataParallel):
// in step 1 every rank captures its shard; in step 2 every rank writes
// shard-<rank>-of-<world>.safetensors (role "shard") and rank 0 writes the replicated buffers as
// model.safetensors; in step 3 each rank's part lists its file; the commit adds them to the manifest
// with the layout ("sharding"). Restore (checkpointer_restore.cpp) reads the replicated files on
// every rank and lets the module cut its own slices out of the saved shard files (resharding to any
// world size). A replicated model whose ranks keep state of their own (a RankStateCheckpointable:
// DDP with PowerSGD) has every rank write its rank-<r>-of-<W> file in step 2 (rank_state_file.h).
// In-memory snapshots (CheckpointOptions::snapshot_every_steps, snapshots.h,
// checkpointer_snapshots.cpp) are the saves of a second, inner Checkpointer into a directory in
// tmpfs: maybe_save takes one at every due step, and restore chooses among both directories'
// saves as among one.
#include "cohort/checkpointer.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>

#include "checkpoint/agreement.h"
#include "checkpoint/checkpointer_impl.h"
#include "cohort/error.h"
#include "runtime/context_internals.h"
#include "runtime/log.h"

namespace cohort {
namespace {

using namespace std::chrono;
using ckpt::allreduce_int;

// Every live Checkpointer's pending save is finished before a normal exit, also one through exit().
std::mutex g_live_mutex;
std::set<Checkpointer*>* g_live = nullptr;

}  // namespace

Checkpointer::Checkpointer(std::string dir, std::shared_ptr<Context> ctx, CheckpointOptions options)
    : dir_(std::move(dir)), ctx_(std::move(ctx)), options_(options) {
  if (!ctx_) throw ConfigError(-1, "Checkpointer needs the Context from cohort::init()");
  const int rank = ctx_->rank();
  if (dir_.empty()) throw ConfigError(rank, "Checkpointer: the checkpoint directory is empty");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (options_.every_steps < 0 || options_.every_seconds < 0 || options_.keep_last < 0 ||
      options_.keep_every_steps < 0 || options_.snapshot_every_steps < 0)
    throw ConfigError(rank, "Checkpointer: every_steps, every_seconds, keep_last, keep_every_steps and "
                            "snapshot_every_steps must be >= 0");
  impl_ = std::make_unique<Impl>(*this);
  impl_->sequence_ = detail::ContextInternals::next_sequence(*ctx_);
  impl_->open_snapshots();  // before the lock below: it makes a Checkpointer too
  impl_->rejoin_listener_ =
      detail::ContextInternals::add_rejoin_listener(*ctx_, "the Checkpointer", [impl = impl_.get()] { impl->release(); },
                                                    [impl = impl_.get()] { impl->reconnect(); });
  std::lock_guard<std::mutex> lock(g_live_mutex);
  if (!g_live) {
    g_live = new std::set<Checkpointer*>();
    std::atexit([] {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      for (Checkpointer* c : *g_live) {
        const std::string e = c->impl_->join();
        if (!e.empty()) detail::log_warn("checkpoint save failed: " + e);
      }
    });
  }
  g_live->insert(this);
}

Checkpointer::~Checkpointer() {
  detail::ContextInternals::remove_rejoin_listener(*ctx_, impl_->rejoin_listener_);
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live->erase(this);
  }
  const std::string e = impl_->join();
  if (!e.empty()) detail::log_warn("checkpoint save failed: " + e);
}

std::string Checkpointer::last_error() const { return impl_->last_error_; }
int64_t Checkpointer::saves_committed() const { return impl_->committed_; }

void Checkpointer::wait() {
  impl_->wait_for_snapshot();
  const std::string e = impl_->join();
  if (!e.empty()) {
    impl_->last_error_ = e;
    throw CheckpointError(ctx_->rank(), "background checkpoint save failed: " + e);
  }
}

void Checkpointer::save(const TrainingState& state) {
  wait();
  SaveJob job = impl_->capture(state, /*copy=*/false);
  impl_->last_save_ = steady_clock::now();
  try {
    impl_->write_and_commit(job);
  } catch (const Error& e) {
    impl_->last_error_ = e.what();
    throw;
  } catch (const std::exception& e) {  // the store's own errors
    impl_->last_error_ = e.what();
    throw CheckpointError(ctx_->rank(), std::string("checkpoint save failed: ") + e.what());
  }
  impl_->last_error_.clear();
}

void Checkpointer::save_async(const TrainingState& state) {
  wait();
  impl_->last_error_.clear();
  impl_->last_save_ = steady_clock::now();
  impl_->start(impl_->capture(state, /*copy=*/true));
}

bool Checkpointer::maybe_save(const TrainingState& state) {
  // The agent asked this process to rejoin (keep_running.h): a peer was replaced that this rank has
  // not met in a collective yet (local SGD trains on between synchronisations). Stop before this
  // step counts, rather than at the next collective, so that it goes back as few steps as the others.
  impl_->stop_if_job_reforms(ctx_->generation());
  ++step_;
  const std::string earlier = impl_->reap_if_finished();
  if (!earlier.empty()) {
    impl_->last_error_ = earlier;
    detail::log_warn("background checkpoint save failed (training continues): " + earlier);
  }
  bool due = options_.every_steps > 0 && step_ % options_.every_steps == 0;
  if (options_.every_seconds > 0) {
    const bool late = duration<double>(steady_clock::now() - impl_->last_save_).count() >= options_.every_seconds;
    // Clocks differ between ranks: rank 0's view decides, so every rank saves at the same step.
    due |= allreduce_int(*ctx_, ctx_->rank() == 0 && late ? 1 : 0, c10d::ReduceOp::MAX) != 0;
  }
  if (due && options_.async && options_.when_busy == CheckpointOptions::WhenBusy::skip &&
      allreduce_int(*ctx_, impl_->busy() ? 1 : 0, c10d::ReduceOp::MAX) != 0) {
    detail::log(detail::LogLevel::info, "checkpoint at step " + std::to_string(step_) +
                                            " skipped: the previous save is still being written");
    due = false;
  }
  if (!due) {
    impl_->maybe_snapshot(state);
    return false;
  }
  try {
    if (options_.async) {
      const std::string e = impl_->join();
      if (!e.empty()) detail::log_warn("background checkpoint save failed (training continues): " + e);
      impl_->last_save_ = steady_clock::now();
      impl_->start(impl_->capture(state, /*copy=*/true));
      // The disk save commits in the background, perhaps steps from now: the snapshot of this
      // step keeps the newest committed state within one step of training meanwhile.
      impl_->maybe_snapshot(state);
    } else {
      save(state);
    }
  } catch (const std::exception& e) {
    impl_->last_error_ = e.what();
    detail::log_warn(std::string("checkpoint save failed (training continues): ") + e.what());
    impl_->maybe_snapshot(state);
    return false;
  }
  return true;
}
}  // namespace cohort
