#include "checkpoint/sharded/shard_files.h"

#include <sys/stat.h>

#include "cohort/error.h"

namespace cohort::ckpt {

ShardFiles::ShardFiles(std::string dir, const Manifest& manifest, int rank)
    : dir_(std::move(dir)), manifest_(manifest), rank_(rank) {}

void ShardFiles::check_present(const std::string& dir, const Manifest& manifest, int rank) {
  std::vector<bool> seen(static_cast<size_t>(manifest.world_size), false);
  for (const auto& f : manifest.files) {
    if (f.role != "shard") continue;
    if (f.rank < 0 || f.rank >= manifest.world_size)
      throw CheckpointError(rank, f.name + ": shard of rank " + std::to_string(f.rank) + " in a world of " + std::to_string(manifest.world_size));
    struct stat st {};
    if (::lstat((dir + "/" + f.name).c_str(), &st) != 0)
      throw CheckpointError(rank, f.name + ": missing");
    if (!S_ISREG(st.st_mode)) throw CheckpointError(rank, f.name + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) != f.bytes)
      throw CheckpointError(rank, f.name + ": " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(f.bytes));
    seen[static_cast<size_t>(f.rank)] = true;
  }
  for (size_t r = 0; r < seen.size(); ++r)
    if (!seen[r]) throw CheckpointError(rank, "the manifest lists no shard file of rank " + std::to_string(r));
}

at::Tensor ShardFiles::tensor(int saved_rank, const std::string& name) const {
  for (const auto& [key, t] : recent_)
    if (key.first == saved_rank && key.second == name) return t;
  auto it = loaded_.find(saved_rank);
  if (it == loaded_.end()) {
    const ManifestFile* file = nullptr;
    for (const auto& f : manifest_.files)
      if (f.role == "shard" && f.rank == saved_rank) file = &f;
    if (!file) throw CheckpointError(rank_, dir_ + " has no shard file of rank " + std::to_string(saved_rank));
    it = loaded_.emplace(saved_rank, std::make_unique<TensorFileReader>(dir_, *file, rank_)).first;
  }
  const TensorEntry* e = it->second->find(name);
  if (!e) return at::Tensor();
  constexpr size_t kRecent = 4;
  if (recent_.size() == kRecent) recent_.pop_front();
  recent_.emplace_back(std::make_pair(saved_rank, name), it->second->read(*e));
  return recent_.back().second;
}


}  // namespace cohort::ckpt
