// cohort/mesh_checkpoint.h — checkpoints of a model trained on a DeviceMesh (issue 47), restored
// on another mesh: saved at (dp, tp, pp) = (2, 1, 1), restored at (1, 2, 1), (1, 1, 2), ...
//
// A model on a mesh tells the Checkpointer (which finds it with dynamic_cast on the module it is
// given, as it finds a ShardedCheckpointable) what each of its parameters is in the un-split model:
// its fully qualified name there, its whole (logical) shape, which dimension tp splits (dim 0 for a
// column-parallel weight, dim 1 for a row-parallel one, the vocabulary rows of the vocab-parallel
// embedding; none: replicated over tp) and which pipeline stage holds it; and, for the optimizer,
// which tensor holds the parameter's state: the local piece itself, or (ZeRO over dp) this rank's
// flat slice of it. Parameters are replicated over dp.
//
// Saved: one shard file per rank with its pieces (each value written once: of a piece replicated
// over dp each dp rank writes its 1/dp, of a parameter replicated over tp the tp rank 0 alone), and
// in the manifest's "sharding" the mesh and, for every parameter, its placement and every piece's
// place and XXH3-64. A restore on any mesh cuts each rank's pieces out of the saved ones by
// parameter name, reading (and checking against its hash) only the saved pieces it overlaps.
// docs/checkpointing.md, "Across meshes", has the format and an example.
// Not here: buffers that differ between ranks, parameters stored in another dtype than they train in.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cohort {

class DeviceMesh;

/// One parameter of a model on a mesh, as this rank holds it (live tensors, not copies).
struct MeshParameter {
  /// The parameter's fully qualified name in the un-split model ("blocks.1.fc1.weight"): the same
  /// name on every mesh, whichever stage holds it.
  std::string name;
  /// Its whole (logical) shape, as the un-split model holds it.
  std::vector<int64_t> shape;
  /// The dimension split over the mesh's "tp" dimension (0: column-parallel weights and biases,
  /// vocabulary rows; 1: row-parallel weights), or -1: replicated over tp.
  int tp_dim = -1;
  /// The pipeline stage that holds it: this rank's coordinate along "pp".
  int stage = 0;
  /// This rank's piece: tp rank t's 1/tp of `shape` along tp_dim (the whole tensor at tp_dim -1).
  at::Tensor local;
  /// The tensor the optimizer keeps state for: `local` itself, or (ZeRO over dp) a 1-D tensor of
  /// this rank's elements of local's flattened elements. Undefined: no optimizer state.
  at::Tensor optimizer_param;
  /// Where optimizer_param's elements begin among local's flattened elements.
  int64_t optimizer_offset = 0;
  /// A copy of a parameter that another stage holds and saves (a tied weight: the GPT's token
  /// embedding on its last stage): restored like that parameter (and its optimizer state), never
  /// saved from here. Its `name` and `shape` are the saved parameter's; `stage` is this rank's.
  bool copy = false;
};

/// What the Checkpointer asks of a model trained on a DeviceMesh (see the top of this header).
class MeshCheckpointable {
 public:
  virtual ~MeshCheckpointable() = default;
  /// The mesh the model is laid out on (dimensions "dp", "tp", "pp"; absent ones count as size 1).
  virtual const DeviceMesh& checkpoint_mesh() const = 0;
  /// This rank's parameters with their placement.
  virtual std::vector<MeshParameter> mesh_parameters() = 0;
  /// Called after a restore wrote into `local` and the optimizer's state (e.g. to refresh copies).
  virtual void mesh_state_loaded() {}
};

}  // namespace cohort
