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

/// Overwrites every tensor with rank 0's values, in flattened chunks per dtype.
void broadcast_from_rank0(Backend& group, const std::vector<torch::Tensor>& tensors, int64_t chunk_bytes);

/// Throws cohort::Error naming the ranks whose tensors differ from rank 0's.
void assert_same_values(Context& ctx, const std::vector<torch::Tensor>& tensors, const std::string& what);

}  // namespace cohort::detail
