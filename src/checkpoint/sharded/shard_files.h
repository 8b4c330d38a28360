// The shard files of one committed checkpoint, as a ShardSource: a restoring rank verifies (against
// the manifest) only the saved ranks' files its new slices overlap, when first asked, and reads
// each tensor it is asked for. Internal.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "checkpoint/format/manifest.h"
#include "checkpoint/format/tensor_file.h"
#include "cohort/sharded_state.h"

namespace cohort::ckpt {

class ShardFiles : public ShardSource {
 public:
  ShardFiles(std::string dir, const Manifest& manifest, int rank);
  const std::string& layout_json() const override { return manifest_.sharding_json; }
  const std::string& optimizer_json() const override { return manifest_.optimizer_json; }
  at::Tensor tensor(int saved_rank, const std::string& name) const override;

  /// Cheap check before choosing a checkpoint: every saved rank's shard file is listed and has its
  /// listed size (the hash is checked when a file is read). Throws CheckpointError.
  static void check_present(const std::string& dir, const Manifest& manifest, int rank);

 private:
  std::string dir_;
  const Manifest& manifest_;
  int rank_;
  mutable std::map<int, std::unique_ptr<TensorFileReader>> loaded_;
  // The last tensors read: resharding asks for the same saved slice once per parameter it holds.
  mutable std::deque<std::pair<std::pair<int, std::string>, at::Tensor>> recent_;
};

}  // namespace cohort::ckpt
