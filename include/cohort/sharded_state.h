// cohort/sharded_state.h — what the Checkpointer asks of a sharded model (ShardedDataParallel
// implements it; the Checkpointer finds it with dynamic_cast on the module it is given).
//
// A shard file holds, per unit k, this rank's slice of the unit's flat parameter ("unit<k>/param")
// and of each optimizer state field ("unit<k>/exp_avg", "unit<k>/step", ...). The layout JSON
// (manifest field "sharding") says which parameter sits where in each unit's flat buffer:
//   {"world_size": 4, "units": [{"numel": 1010, "shard": 253,
//                                "params": [{"name": "fc1.weight", "offset": 0, "numel": 1000}, ...]}]}
// so a restore on another world size, or with other units, cuts its own slices out of the saved
// ones by parameter name (src/checkpoint/sharded/reshard.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace cohort {

/// Tensors with their names, in order.
using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

/// One rank's part of a sharded training state (live tensors, not copies).
struct ShardState {
  NamedTensorList tensors;     ///< "unit<k>/param", "unit<k>/<optimizer field>"
  std::string layout_json;     ///< which parameter sits where in each unit's flat buffer (manifest "sharding")
  std::string optimizer_json;  ///< optimizer type and learning rates (empty without an optimizer)
};

/// The saved shards, as a restore sees them.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  /// The saved layout JSON (ShardState::layout_json).
  virtual const std::string& layout_json() const = 0;
  /// The saved optimizer type and learning rates (ShardState::optimizer_json).
  virtual const std::string& optimizer_json() const = 0;
  /// Saved rank `rank`'s tensor `name`; undefined when that file has none. Reads (and verifies)
  /// the rank's file on first use.
  virtual at::Tensor tensor(int rank, const std::string& name) const = 0;
};

/// The whole state, unsharded, with the names an unsharded (DDP) checkpoint uses:
/// "module.<param>" and "module.<param>/<field>".
struct FullState {
  NamedTensorList model;  ///< parameters and buffers: "module.<param>"
  NamedTensorList optimizer;  ///< optimizer state: "module.<param>/<field>"
};

/// What the Checkpointer asks of a sharded model: ShardedDataParallel and LocalSGD implement it, and
/// the Checkpointer finds it with dynamic_cast on the module it is given.
class ShardedCheckpointable {
 public:
  virtual ~ShardedCheckpointable() = default;
  /// This rank's shards and its optimizer state for them.
  virtual ShardState shard_state(const torch::optim::Optimizer* optimizer) = 0;
  /// State every rank holds alike (buffers), written once by rank 0.
  virtual NamedTensorList replicated_tensors() = 0;
  /// Cuts this rank's shards (and optimizer state) out of the saved ones; sets learning rates.
  virtual void load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) = 0;
  /// Gathers the whole state to every rank (collective; for tests and export: needs full memory).
  virtual FullState full_state(const torch::optim::Optimizer* optimizer) = 0;
};

/// One rank's own state beside a replicated checkpoint (RankStateCheckpointable).
struct RankState {
  std::string text;         ///< small settings and counters (JSON, say)
  NamedTensorList tensors;  ///< this rank's tensors (live ones when saving)
  /// Neither text nor tensors: nothing to save.
  bool empty() const { return text.empty() && tensors.empty(); }
};

/// What the Checkpointer asks of a replicated model whose ranks also hold state of their own:
/// DistributedDataParallel with a communication hook that remembers (PowerSGD's error feedback
/// and Qs). Each rank writes its own file (rank-R-of-W.safetensors) beside rank 0's model file.
class RankStateCheckpointable {
 public:
  virtual ~RankStateCheckpointable() = default;
  /// This rank's state now; empty: nothing to save.
  virtual RankState rank_state() = 0;
  /// Gives back what this rank saved (`same_world`), or what saved rank (rank mod saved world
  /// size) saved in a job of another size; empty when the checkpoint holds none.
  virtual void load_rank_state(const RankState& saved, bool same_world) = 0;
};

}  // namespace cohort
