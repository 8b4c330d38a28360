// manifest.json: what makes a directory a checkpoint. Written last, by rank 0, under a temporary
// name and renamed into place: that rename is the commit. A directory without a manifest that
// parses is not a checkpoint (a save that was interrupted), whatever else it holds.
//
//   {"format": "cohort-checkpoint", "version": 1, "step": 1200, "epoch": 3, "world_size": 2,
//    "created_unix_ms": ..., "files": [{"name": "model.safetensors", "bytes": N, "xxh3": "<16 hex>",
//    "rank": 0, "role": "model"}, ...], "sampler": {...}, "optimizer": {...},
//    "rng": [{"rank": 0, "cpu": "<hex>"}, ...], "metadata": {"<key>": "<value>"},
//    "user": {"<name>": "<Stateful::state_dict() text>"},
//    "sharding": {...},   (sharded state only: shard files have role "shard", one per rank)
//    "rank_state": {"<rank>": "<text>"},   (replicated state whose ranks keep state of their own,
//                         e.g. a DDP comm hook's: files of role "rank_state", one per rank)
//    "program": "<identity>"}   (in-memory snapshots only: the program that wrote it, program_identity.h)
//
// docs/checkpointing.md describes every field. Internal header, no torch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/storage/file_io.h"

namespace cohort::ckpt {

inline constexpr const char* kManifestName = "manifest.json";
/// A manifest larger than this is refused rather than read: it lists files and small JSON states,
/// and 64 MiB is far beyond any real one.
inline constexpr uint64_t kMaxManifestBytes = 64u << 20;
inline constexpr const char* kFormatName = "cohort-checkpoint";
inline constexpr int kFormatVersion = 1;

struct ManifestFile : FileRecord {
  int rank = 0;      // the rank that wrote it
  std::string role;  // "model", "optimizer", "shard" (one rank's part of a sharded state), or
                     // "rank_state" (one rank's own tensors beside replicated state)
};

struct RankRng {
  int rank = 0;
  std::string cpu;                // the CPU generator's state, hex
  std::vector<std::string> cuda;  // one per CUDA device the rank had, hex
};

struct Manifest {
  int version = kFormatVersion;
  int64_t step = 0;
  int64_t epoch = 0;
  int world_size = 1;
  int64_t created_unix_ms = 0;
  std::vector<ManifestFile> files;
  std::string sampler_json;    // SamplerState::to_json(), or empty
  std::string optimizer_json;  // optimizer type and hyper-parameters per group, or empty
  std::vector<RankRng> rng;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> user;  // cohort::Stateful objects' state by name (absent: none)
  /// Sharded state only: which parameter sits where in each unit's flat buffer ("sharding" field,
  /// layout in include/cohort/sharded_state.h); empty for replicated state.
  std::string sharding_json;
  /// Each rank's own state's text (RankState::text), with its "rank_state" file; empty: none.
  std::map<int, std::string> rank_state;
  /// The writing program's identity (program_identity.h); in-memory snapshots only, else empty.
  std::string program;

  std::string to_json() const;
  /// Throws std::runtime_error naming what is wrong (not JSON, a missing field, another format).
  static Manifest parse(const std::string& text);
};

/// "step-00001200": checkpoint directories sort by name in step order.
std::string step_dir_name(int64_t step);
/// The step of a directory named like step_dir_name, or -1.
int64_t step_from_dir_name(const std::string& name);

/// Hex of raw bytes and back (RNG states in the manifest).
std::string bytes_to_hex(const void* data, size_t bytes);
std::vector<uint8_t> hex_to_bytes(const std::string& hex);  // throws std::invalid_argument

}  // namespace cohort::ckpt
