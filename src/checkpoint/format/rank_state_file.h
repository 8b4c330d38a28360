// A rank's own state beside a replicated checkpoint (RankStateCheckpointable, e.g. a DDP comm
// hook's): written by every rank as rank-<r>-of-<W>.safetensors (role "rank_state"), its text in
// the manifest's "rank_state". A restore on W' ranks gives rank r what saved rank r mod W wrote.
// Internal.
#pragma once

#include <memory>
#include <string>

#include "checkpoint/format/manifest.h"
#include "checkpoint/format/tensor_file.h"
#include "cohort/sharded_state.h"

namespace cohort::ckpt {

/// One rank's file of a checkpoint: "<kind>-00003-of-00008.safetensors" (kind "shard" for sharded
/// state, "rank" for a rank's own state).
std::string per_rank_file_name(const char* kind, int rank, int world);

/// The saved rank whose state rank `rank` takes.
inline int rank_state_source(int rank, const Manifest& m) { return rank % m.world_size; }

/// Opens (and verifies) the rank_state file rank `rank` takes; null when the checkpoint has none.
/// Throws CheckpointError when it is listed but missing or damaged.
std::unique_ptr<TensorFileReader> open_rank_state(const std::string& dir, const Manifest& m, int rank);

/// The text and every tensor of that file, as new CPU tensors.
RankState read_rank_state(const TensorFileReader* file, const Manifest& m, int rank);

}  // namespace cohort::ckpt
