// FlatUnit: one unit of sharded data parallel — its parameters laid end to end in one flat buffer,
// padded to a multiple of the world size, and this rank's shard of it (internal).
//
//   full  [ p0 | p1 | ... | pad ]   numel = sum of the parameters' elements, padded = W * shard_size
//   rank r owns full[r * shard_size, (r + 1) * shard_size)
//
// The module's parameters are bound once (set_data) to views of `full`, so gathering writes
// straight into them. Freeing (level 3) drops the storage's bytes but keeps the StorageImpl: the
// views autograd saved in forward point at it and see the data again after the next gather, as in
// PyTorch's FSDP (storage resize to 0 and back). Writes go through aliases that have their own
// version counter, so autograd's saved-tensor check does not see a gather as an in-place change.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace cohort::detail {

struct FlatParam {
  std::string name;
  torch::Tensor param;  // the module's parameter (leaf)
  int64_t offset = 0;   // in the unit's flat buffer
  int64_t numel = 0;
};

class FlatUnit {
 public:
  /// `own_shard`: the shard is a tensor of its own (level 3); otherwise it aliases its region of
  /// `full`, which then never gets freed (levels 1, 2).
  FlatUnit(std::vector<FlatParam> params, int rank, int world, bool own_shard);

  const std::vector<FlatParam>& params() const { return params_; }
  int64_t numel() const { return numel_; }
  int64_t padded() const { return shard_size_ * world_; }
  int64_t shard_size() const { return shard_size_; }
  int64_t shard_begin() const { return shard_size_ * rank_; }

  /// The leaf tensor the optimizer updates.
  const torch::Tensor& shard() const { return shard_; }
  /// Whether `full` currently has its bytes.
  bool allocated() const { return allocated_; }
  void allocate();
  void release();
  /// A writable tensor over `full`'s storage (length padded()) with its own version counter.
  torch::Tensor full_alias() const;
  /// The own shard's region of full_alias().
  torch::Tensor own_region() const { return full_alias().narrow(0, shard_begin(), shard_size_); }
  /// Copies the module's current parameter values into `full` (construction, before binding).
  void copy_params_into_full();
  /// Makes each parameter a view of `full` (once, at construction).
  void bind_params();
  /// Copies the own region of `full` into the shard (level 3 construction, restore).
  void shard_from_full();

  /// Version of the shard when `full` was last gathered from it (-1: never / freed).
  int64_t gathered_version = -1;
  /// The shard may have changed without its version counter moving: libtorch 1.13's SGD writes
  /// through p.data(), which has a counter of its own. Set after every synchronised backward (an
  /// optimizer step may follow) and on restore.
  bool stale = false;

 private:
  std::vector<FlatParam> params_;
  int rank_, world_;
  int64_t numel_ = 0, shard_size_ = 0;
  bool own_shard_;
  bool allocated_ = true;
  torch::Tensor full_;   // plain tensor (no autograd); its StorageImpl is the unit's for life
  torch::Tensor shard_;
};

}  // namespace cohort::detail
