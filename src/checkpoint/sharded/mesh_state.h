// Checkpoints of a model on a device mesh (include/cohort/mesh_checkpoint.h): what a rank writes
// (mesh_save.cpp), how rank 0 describes every rank's pieces in the manifest, and how a rank on
// another mesh cuts its pieces out of the saved ones, reading only the pieces it overlaps
// (mesh_restore.cpp). Internal header.
//
// The manifest's "sharding" of such a checkpoint:
//   {"mesh": [{"name": "pp", "size": 1}, {"name": "dp", "size": 2}, {"name": "tp", "size": 1}],
//    "params": {"<name>": {"shape": [64, 16], "dtype": "F32", "tp_dim": 0, "stage": 0, "tp": 1,
//               "pieces": [{"field": "param", "rank": 0, "block": 0, "begin": 0, "end": 512,
//                           "xxh3": "<16 hex>"}, ...,
//                          {"field": "step", "rank": 0, "scalar": true, "xxh3": "..."}]}}}
// A piece is elements [begin, end) of the flattened tp block `block` (of "tp" blocks along tp_dim)
// of the field ("param", or an optimizer field such as "exp_avg"), stored in saved rank `rank`'s
// shard file as the tensor "<name>/<field>".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/format/manifest.h"
#include "checkpoint/format/tensor_file.h"

namespace torch::optim {
class Optimizer;
}

namespace cohort {
class MeshCheckpointable;
}

namespace cohort::ckpt {

/// One rank's part of a mesh checkpoint, taken on the caller's thread.
struct MeshCapture {
  NamedTensors tensors;        // live tensors (views) for this rank's shard file
  std::string pieces_json;     // what each tensor is (without hashes: pieces_with_hashes adds them)
  std::string mesh_json;       // the mesh's dimensions
  std::string optimizer_json;  // optimizer type and learning rates (empty without one)
};
MeshCapture mesh_capture(MeshCheckpointable& model, const torch::optim::Optimizer* optimizer, int rank);

/// The pieces with each tensor's XXH3-64 (`tensors` are the ones written, in the capture's order).
std::string pieces_with_hashes(const std::string& pieces_json, const NamedTensors& tensors);

/// Rank 0's commit: every rank's pieces (JSON texts, by rank) merged into the manifest's
/// "sharding". Throws CheckpointError when ranks disagree about a parameter (shape, placement).
std::string merge_mesh_pieces(const std::string& mesh_json, const std::vector<std::string>& pieces, int rank);

/// Whether a manifest's "sharding" is a mesh checkpoint's.
bool is_mesh_sharding(const std::string& sharding_json);

/// Fills the model's pieces and the optimizer's state for them from the checkpoint in `dir`.
/// Throws CheckpointError — one line naming the parameter, the rank and the numbers — for a
/// parameter the checkpoint lacks, of another shape, or that cannot be placed on this mesh.
void mesh_restore(MeshCheckpointable& model, torch::optim::Optimizer* optimizer, const std::string& dir,
                  const Manifest& manifest, int rank);

/// Bytes of tensor data this thread read from mesh shard files (tests: a rank reads only what it needs).
uint64_t& mesh_bytes_read();

}  // namespace cohort::ckpt
