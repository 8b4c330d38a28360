#include "checkpoint/format/rank_state_file.h"

#include <cstdio>

#include "cohort/error.h"

namespace cohort::ckpt {

std::string per_rank_file_name(const char* kind, int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s-%05d-of-%05d.safetensors", kind, rank, world);
  return name;
}

std::unique_ptr<TensorFileReader> open_rank_state(const std::string& dir, const Manifest& m, int rank) {
  if (m.rank_state.empty()) return nullptr;
  const int source = rank_state_source(rank, m);
  for (const auto& f : m.files)
    if (f.role == "rank_state" && f.rank == source) return std::make_unique<TensorFileReader>(dir, f, rank);
  throw CheckpointError(rank, "the manifest lists no rank_state file of rank " + std::to_string(source));
}

RankState read_rank_state(const TensorFileReader* file, const Manifest& m, int rank) {
  RankState s;
  if (!file) return s;
  s.text = m.rank_state.at(rank_state_source(rank, m));
  for (const auto& e : file->entries()) s.tensors.emplace_back(e.name, file->read(e));
  return s;
}

}  // namespace cohort::ckpt
