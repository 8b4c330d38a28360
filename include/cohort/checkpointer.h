// cohort/checkpointer.h — saving and restoring the whole training state, safely and mostly in the
// background.
//
//   cohort::CheckpointOptions options;
//   options.every_steps = 100;
//   cohort::Checkpointer checkpoints("checkpoints", ctx, options);
//   checkpoints.restore_latest(model, optimizer, sampler);  // no-op on a fresh start
//   for (...) { ...; optimizer.step(); checkpoints.maybe_save(model, optimizer, sampler); }
//
// What a checkpoint holds: the module's parameters and buffers, the optimizer's state (SGD
// momentum; Adam/AdamW moments and step counts; RMSprop; Adagrad) and learning rates, the
// sampler's state, every rank's RNG state, the step, the epoch, your own objects' state
// (cohort::Stateful: a learning-rate schedule, counters) and a small key-value map of yours.
// Layout and guarantees are in docs/checkpointing.md; in short:
//  * one directory per checkpoint (DIR/step-00001200/), tensors in safetensors files, and a
//    manifest.json with sizes and XXH3-64 checksums written last: its rename is the commit, so a
//    crash at any moment leaves either the previous checkpoint or the new one, never a partial one;
//  * replicated (DDP) state is written by rank 0 alone; every rank adds its RNG state (and, with
//    sharded training, its own shard file) and rank 0 commits once all ranks have reported;
//  * asynchronous saves copy the tensors to memory kept between saves and write in a background
//    thread; at most one save is in flight; a failed one is reported at the next call;
//  * restore takes the newest checkpoint that verifies on every rank, skipping (with a warning
//    naming the file and the reason) ones that are incomplete or corrupt, also on a different
//    world size (the sampler then shares the rest of the epoch out again).
// Every rank must construct the Checkpointer and make the same calls in the same order: saves and
// restores are collective.
// Sharded state: a module that is a ShardedCheckpointable (ShardedDataParallel, sharded_state.h)
// is saved as one shard file per rank and restored on any world size (docs/sharded.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace torch::nn {
class Module;
template <typename Contained>
class ModuleHolder;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace cohort {

class Context;
class DistributedSampler;

/// When a Checkpointer saves, which checkpoints it keeps, and how it writes them.
struct CheckpointOptions {
  /// maybe_save saves when the step is a multiple of this (0: never by step count).
  int64_t every_steps = 0;
  /// ... or when this many seconds passed since the last save (0: never by time). The ranks decide
  /// together (one tiny allreduce per maybe_save), so they all save at the same step.
  double every_seconds = 0;
  /// Retention: keep the newest `keep_last` checkpoints (0 keeps all) ...
  int keep_last = 3;
  /// ... and, forever, those whose step is a multiple of this (0: none).
  int64_t keep_every_steps = 0;
  /// maybe_save writes in the background (save() is always synchronous).
  bool async = true;
  /// A save that is due while the previous one is still being written: wait for it, or skip this one.
  enum class WhenBusy { wait, skip };
  /// What an asynchronous maybe_save does with such a save (the ranks decide together).
  WhenBusy when_busy = WhenBusy::wait;
  /// How long rank 0 waits for the other ranks' parts of a save before giving it up.
  std::chrono::milliseconds commit_timeout{std::chrono::seconds(300)};
  /// In-memory snapshots, the fast path of recovery: every this many steps (0: none; 1 is
  /// affordable for models of tens of MB) maybe_save also writes the whole training state to
  /// `snapshot_dir`, a directory in memory (tmpfs) that outlives a killed worker, in the background,
  /// keeping the newest two (a crash during one leaves the previous whole). restore_latest takes
  /// the newest of snapshots and checkpoints, so a restarted job loses at most one step instead of
  /// up to every_steps. Disk checkpoints stay the long-term record. Each machine keeps a whole copy,
  /// and a machine that lost its copy gets the newest from another at restore. For now state held
  /// per rank (shards, PowerSGD's) is snapshotted only when every rank is on one machine.
  int64_t snapshot_every_steps = 0;
  /// Where snapshots go. Empty: COHORT_SNAPSHOT_DIR, which `cohort run` sets to a private directory
  /// in /dev/shm for each job and removes when the job ends; without either, no snapshots (a note).
  std::string snapshot_dir;
};

/// What restore_latest found and applied.
struct RestoreInfo {
  std::string path;  ///< the checkpoint's or snapshot's directory (DIR/step-00001200)
  int64_t step = 0;  ///< the step it was saved at; the Checkpointer counts on from it
  int64_t epoch = 0;  ///< the sampler's epoch when it was saved (0 without a sampler)
  int saved_world_size = 0;  ///< the world size that saved it
  bool from_snapshot = false;  ///< taken from an in-memory snapshot (CheckpointOptions::snapshot_every_steps)
  std::map<std::string, std::string> metadata;  ///< your key-value pairs saved with it (metadata() has them too)
};

/// State of your own that checkpoints carry, like torch.distributed.checkpoint's Stateful: a
/// learning-rate schedule, a data position of your own, counters. Saved as the text state_dict()
/// returns (JSON, say) in the manifest, from rank 0 — keep it the same on every rank — and handed
/// back to load_state_dict() by restore, after the module, optimizer and sampler. Small values
/// only: tensors belong in the module or the optimizer.
class Stateful {
 public:
  virtual ~Stateful() = default;
  /// This object's state as text (JSON, say); keep it the same on every rank (rank 0's is saved).
  virtual std::string state_dict() const = 0;
  /// Throw (any std::exception) if the text does not fit: the restore then fails with a
  /// CheckpointError naming the object.
  virtual void load_state_dict(const std::string& state) = 0;
};

/// Stateful objects by name; each is saved under its name, and restore requires every one.
using UserStates = std::map<std::string, Stateful*>;

/// The objects a checkpoint covers; optimizer and sampler may be null, `user` empty.
struct TrainingState {
  torch::nn::Module* module = nullptr;  ///< the model (parameters and buffers); must not be null
  torch::optim::Optimizer* optimizer = nullptr;  ///< its optimizer (state and learning rates), or null
  DistributedSampler* sampler = nullptr;  ///< the data sampler (its place in the epoch), or null
  UserStates user;  ///< your own Stateful objects, by name
};

/// Saves and restores the whole training state (module, optimizer, sampler, every rank's RNG state,
/// step, epoch, your own state) in a directory of checkpoints. Saves and restores are collective:
/// every rank constructs a Checkpointer and makes the same calls in the same order.
class Checkpointer {
 public:
  /// Checkpoints in `dir` for the job `ctx` (the shared pointer cohort::init() returns). Throws
  /// ConfigError without a Context, for an empty `dir`, or for a negative count or interval in
  /// `options`.
  Checkpointer(std::string dir, std::shared_ptr<Context> ctx, CheckpointOptions options = {});
  /// Finishes a save in flight (a failure is logged, not thrown).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  /// Restores the newest valid checkpoint; std::nullopt when there is none (a fresh start).
  /// Throws CheckpointError when one exists but does not fit (another model, another optimizer).
  std::optional<RestoreInfo> restore_latest(const TrainingState& state);
  /// Counts a step, and saves when the policy says so (async unless options.async is false).
  /// Returns whether a save started. A failed save — this one or an earlier background one — is
  /// logged as a warning and training carries on; last_error() keeps the message.
  bool maybe_save(const TrainingState& state);
  /// Saves now and returns once the checkpoint is committed. Throws CheckpointError.
  void save(const TrainingState& state);
  /// Snapshots now and writes in the background. Throws the previous background save's error.
  void save_async(const TrainingState& state);
  /// Waits for the save in flight; throws its error, if it failed. Under keep_running(), a
  /// snapshot given up because the job re-forms around a replaced peer throws CommError instead
  /// (keep_running() rejoins; the step it covered is not counted).
  void wait();

  /// Optimizer steps counted by maybe_save (or restored); the checkpoint's step.
  int64_t step() const { return step_; }
  /// Sets that count; maybe_save counts on from it.
  void set_step(int64_t step) { step_ = step; }
  /// Your key-value pairs, saved with every checkpoint and filled in again by restore.
  std::map<std::string, std::string>& metadata() { return metadata_; }
  /// The last failed save's message, empty if none failed since the last success.
  std::string last_error() const;
  /// Saves committed by this process (rank 0), and bytes it wrote in them.
  int64_t saves_committed() const;
  /// The checkpoint directory, as given (without trailing slashes).
  const std::string& dir() const { return dir_; }

  // The usual spellings: a module or module holder (DDP), then optimizer, sampler and your own
  // Stateful objects, e.g. checkpoints.maybe_save(model, optimizer, sampler, {{"schedule", &schedule}}).
  /// restore_latest(const TrainingState&) for a model, its optimizer, the sampler and your objects.
  template <typename M>
  std::optional<RestoreInfo> restore_latest(M& model, torch::optim::Optimizer& optimizer, DistributedSampler& sampler,
                                            UserStates user = {}) {
    return restore_latest(TrainingState{&module_of(model), &optimizer, &sampler, std::move(user)});
  }
  /// maybe_save(const TrainingState&) for a model, its optimizer, the sampler and your objects.
  template <typename M>
  bool maybe_save(M& model, torch::optim::Optimizer& optimizer, DistributedSampler& sampler, UserStates user = {}) {
    return maybe_save(TrainingState{&module_of(model), &optimizer, &sampler, std::move(user)});
  }
  /// save(const TrainingState&) for a model, its optimizer, the sampler and your objects.
  template <typename M>
  void save(M& model, torch::optim::Optimizer& optimizer, DistributedSampler& sampler, UserStates user = {}) {
    save(TrainingState{&module_of(model), &optimizer, &sampler, std::move(user)});
  }
  /// save_async(const TrainingState&) for a model, its optimizer, the sampler and your objects.
  template <typename M>
  void save_async(M& model, torch::optim::Optimizer& optimizer, DistributedSampler& sampler, UserStates user = {}) {
    save_async(TrainingState{&module_of(model), &optimizer, &sampler, std::move(user)});
  }

 private:
  template <typename T>
  static torch::nn::Module& module_of(torch::nn::ModuleHolder<T>& holder) {
    return *holder;
  }
  static torch::nn::Module& module_of(torch::nn::Module& module) { return module; }

  class Impl;
  std::string dir_;
  std::shared_ptr<Context> ctx_;
  CheckpointOptions options_;
  int64_t step_ = 0;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
