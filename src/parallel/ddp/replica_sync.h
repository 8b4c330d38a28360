// Keeping replicas identical across ranks (internal to DDP): the same model everywhere, rank 0's
// values everywhere, and a debug check that they stayed equal.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/context.h"

namespace cohort::detail {

struct NamedTensor {
  std::string kind;  // "parameter" or "buffer"
  std::string name;
  torch::Tensor tensor;
};

/// One line per tensor: kind, name, shape, dtype. Equal on two ranks iff the models match.
std::string model_signature(const std::vector<NamedTensor>& tensors);

/// Throws ConfigError on every rank, naming the first difference, when any rank's model
/// signature, or its `settings` (lines such as "comm hook 'fp16'"), differs from rank 0's. All
/// ranks take part in the same collectives: no hang. `owner` begins the message.
void check_same_model(Context& ctx, const std::vector<NamedTensor>& tensors, const std::string& settings = "",
                      const std::string& owner = "DistributedDataParallel");

/// check_same_model for a signature kept from before (model_signature()): what a rank whose
/// tensors changed shape since (ShardedDataParallel's, flattened) checks at a rejoin.
void check_same_signature(Context& ctx, const std::string& model, const std::string& settings, const std::string& owner);

/// Overwrites every tensor with rank 0's values, in flattened chunks per dtype. Without
/// `write_back` the values are received and dropped: a rank that only has to take part (its
/// `tensors` may then be placeholders of the right shapes, e.g. expanded scalars).
void broadcast_from_rank0(Backend& group, const std::vector<torch::Tensor>& tensors, int64_t chunk_bytes,
                          bool write_back = true);

/// Throws cohort::Error naming the ranks whose tensors differ from rank 0's.
void assert_same_values(Context& ctx, const std::vector<torch::Tensor>& tensors, const std::string& what);

}  // namespace cohort::detail
