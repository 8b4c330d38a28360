// Restore (checkpointer.cpp): the newest checkpoint or snapshot every rank can verify, agreed
// across ranks, then applied — model, optimizer, sampler, user state, RNG.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <set>

#include "checkpoint/agreement.h"
#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/checkpointer_impl.h"
#include "checkpoint/format/rank_state_file.h"
#include "checkpoint/sharded/mesh_state.h"
#include "checkpoint/sharded/shard_files.h"
#include "checkpoint/snapshots/snapshot_sharing.h"
#include "checkpoint/snapshots/snapshots.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "cohort/mesh_checkpoint.h"
#include "cohort/sharded_state.h"
#include "runtime/check.h"
#include "runtime/log.h"

namespace cohort {

using namespace std::chrono;
using ckpt::allreduce_int;

std::optional<RestoreInfo> Checkpointer::restore_latest(const TrainingState& state) {
  COHORT_CHECK(state.module != nullptr, "TrainingState without a module");
  wait();
  detail::MonitorSpan span(impl_->monitor_, "recovery", "compute");
  const auto began = steady_clock::now();
  const int rank = ctx_->rank();
  Checkpointer* snapshots = impl_->snapshots_.get();
  if (snapshots && snapshots->impl_->other_copies_ > 0) ckpt::share_newest_snapshot(*ctx_, snapshots->dir_);
  const auto listed = snapshots ? ckpt::merge_listings(ckpt::list_checkpoints(dir_), ckpt::list_checkpoints(snapshots->dir_))
                                : ckpt::list_checkpoints(dir_);

  // Each rank loads the newest checkpoint it can verify; the ranks then agree on the oldest of
  // their choices (a file one rank cannot read rules that checkpoint out for all) and whoever
  // holds a newer one loads the agreed one. Every rank takes part in every round (a rank whose
  // choice already is the oldest keeps it and waits for the others' verdict), until all choices
  // are the same. The step only goes down, so this ends.
  struct Loaded {
    const ckpt::ListedCheckpoint* listed = nullptr;
    std::vector<std::unique_ptr<ckpt::TensorFileReader>> files;
    std::unique_ptr<ckpt::TensorFileReader> rank_state;  // the saved rank's own state this rank takes
  };
  auto* own_state = dynamic_cast<RankStateCheckpointable*>(state.module);  // DDP: its comm hook's per-rank state
  // Snapshots name the program that wrote them; another program's are skipped (program_identity.h).
  const std::string program = snapshots ? snapshots->impl_->program_ : std::string();
  Loaded loaded;
  std::set<std::string> warned;
  int64_t bound = INT64_MAX;
  for (;;) {
    if (!loaded.listed || loaded.listed->step > bound) loaded = Loaded{};
    for (const auto& c : listed) {
      if (loaded.listed) break;  // the choice of the last round stands
      if (c.step > bound) continue;
      if (!c.manifest) {
        if (warned.insert(c.path).second) detail::log_warn("skipping checkpoint " + c.path + ": " + c.problem);
        continue;
      }
      if (!program.empty() && !c.manifest->program.empty() && c.manifest->program != program) {
        if (warned.insert(c.path).second)
          detail::log_warn("skipping snapshot " + c.path + ": written by another program version (" + c.manifest->program +
                           "; this rank runs " + program + ")");
        continue;
      }
      try {
        Loaded attempt{&c, {}, nullptr};
        for (const auto& f : c.manifest->files)
          if (f.role == "model" || f.role == "optimizer")  // replicated: every rank reads them
            attempt.files.push_back(std::make_unique<ckpt::TensorFileReader>(c.path, f, rank));  // verified here
        if (!c.manifest->sharding_json.empty()) ckpt::ShardFiles::check_present(c.path, *c.manifest, rank);
        if (own_state)
          attempt.rank_state = ckpt::open_rank_state(c.path, *c.manifest, rank);  // verified here
        ckpt::check_manifest_states(*c.manifest, rank);  // sampler, optimizer, RNG: before anything is applied
        loaded = std::move(attempt);
        break;
      } catch (const Error& e) {
        if (warned.insert(c.path).second)
          detail::log_warn("skipping checkpoint " + c.path + ": " + std::string(e.what()));
      } catch (const std::exception& e) {
        if (warned.insert(c.path).second) detail::log_warn("skipping checkpoint " + c.path + ": " + e.what());
      }
    }
    const int64_t mine = loaded.listed ? loaded.listed->step : -1;
    const int64_t lowest = allreduce_int(*ctx_, mine, c10d::ReduceOp::MIN);
    if (allreduce_int(*ctx_, mine, c10d::ReduceOp::MAX) == lowest) break;
    bound = lowest;
  }
  if (!loaded.listed) {
    span.cancel();  // nothing to restore: no recovery on the timeline
    return std::nullopt;
  }
  const bool from_snapshot = snapshots && loaded.listed->path.rfind(snapshots->dir_ + "/", 0) == 0;

  const ckpt::Manifest& m = *loaded.listed->manifest;
  for (const auto& [name, object] : state.user)  // before anything is applied
    if (!m.user.count(name))
      throw CheckpointError(rank, loaded.listed->path + " holds no state for \"" + name +
                                      "\" (saved by a program without it): restore without it, or start afresh");
  auto* meshed = dynamic_cast<MeshCheckpointable*>(state.module);
  const bool mesh_saved = ckpt::is_mesh_sharding(m.sharding_json);
  if (meshed && !mesh_saved)
    throw CheckpointError(rank, loaded.listed->path + " was not saved by a model on a device mesh; a model on a mesh "
                                "restores only checkpoints of one (docs/checkpointing.md, \"Across meshes\")");
  if (!meshed && mesh_saved)
    throw CheckpointError(rank, loaded.listed->path + " was saved by a model on a device mesh; restore it into a model "
                                "on a mesh (cohort::MeshCheckpointable)");
  if (meshed) ckpt::mesh_restore(*meshed, state.optimizer, loaded.listed->path, m, rank);
  auto* sharded = meshed ? nullptr : dynamic_cast<ShardedCheckpointable*>(state.module);
  if (sharded && m.sharding_json.empty())
    throw CheckpointError(rank, loaded.listed->path + " holds unsharded state; a ShardedDataParallel or LocalSGD model "
                                "restores only per-rank checkpoints (saved by one of them)");
  if (!meshed && !sharded && !m.sharding_json.empty())
    throw CheckpointError(rank, loaded.listed->path + " holds per-rank state (saved by ShardedDataParallel or "
                                "LocalSGD); restore it into a model of that kind");
  if (sharded) {
    torch::NoGradGuard no_grad;
    for (const auto& f : loaded.files) {
      if (f->name() != "model.safetensors") continue;
      for (auto& [name, tensor] : sharded->replicated_tensors()) {
        const ckpt::TensorEntry* e = f->find(name);
        if (!e || c10::IntArrayRef(e->shape) != tensor.sizes())
          throw CheckpointError(rank, "model.safetensors has no tensor \"" + name + "\" of this shape: the checkpoint is of another model");
        f->read_into(*e, tensor);
      }
    }
    sharded->load_shard_state(ckpt::ShardFiles(loaded.listed->path, m, rank), state.optimizer);
  }
  for (const auto& f : loaded.files) {
    if (!meshed && !sharded && f->name() == "model.safetensors") ckpt::load_module_tensors(*state.module, *f, rank);
  }
  if (state.optimizer && !sharded && !meshed) {
    if (m.optimizer_json.empty())
      throw CheckpointError(rank, loaded.listed->path + " holds no optimizer state, but an optimizer was given");
    for (const auto& f : loaded.files)
      if (f->name() == "optimizer.safetensors")
        ckpt::load_optimizer_state(*state.optimizer, *state.module, *f, m.optimizer_json, rank);
  }
  if (own_state)
    own_state->load_rank_state(ckpt::read_rank_state(loaded.rank_state.get(), m, rank), m.world_size == ctx_->world_size());
  if (state.sampler && !m.sampler_json.empty()) state.sampler->load_state(SamplerState::from_json(m.sampler_json));
  for (const auto& [name, object] : state.user) {
    try {
      object->load_state_dict(m.user.at(name));
    } catch (const std::exception& e) {
      throw CheckpointError(rank, loaded.listed->path + ": the state of \"" + name + "\" does not load: " + e.what());
    }
  }
  for (const auto& [name, text] : m.user)
    if (!state.user.count(name))
      detail::log_warn(loaded.listed->path + " holds state for \"" + name + "\", which this restore was not given");
  for (const auto& r : m.rng)
    if (r.rank == rank) ckpt::restore_rng(r, rank);
  if (rank >= m.world_size)
    detail::log(detail::LogLevel::info, "rank " + std::to_string(rank) + " did not exist in the checkpoint (world size " +
                                            std::to_string(m.world_size) + "): its RNG keeps its current state");
  step_ = m.step;
  if (snapshots) {
    snapshots->step_ = m.step;
    if (ctx_->local_rank() == 0) ckpt::drop_snapshots_after(snapshots->dir_, m.step);  // each machine's copy
  }
  impl_->monitor_->set_step(m.step);  // the monitor's step numbers continue from here
  if (rank == 0)
    impl_->monitor_->checkpoint_restored(m.step, loaded.listed->path, from_snapshot,
                                         duration<double>(steady_clock::now() - began).count());
  metadata_ = m.metadata;
  impl_->last_save_ = steady_clock::now();
  RestoreInfo info{loaded.listed->path, m.step, m.epoch, m.world_size, from_snapshot, m.metadata};
  detail::log(detail::LogLevel::info, "restored " + info.path);
  return info;
}

}  // namespace cohort
