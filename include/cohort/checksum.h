// cohort/checksum.h — fingerprints of tensors, to compare training state across ranks and runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace cohort {

/// xxHash64 of the tensors' bytes (after a CPU, contiguous copy), in order.
uint64_t tensors_hash(const std::vector<at::Tensor>& tensors);

/// 16 hex digits: tensors_hash of a module's parameters in registration order. Equal on every
/// rank of a DDP job, and between bitwise identical runs.
std::string parameters_checksum(const torch::nn::Module& module);

}  // namespace cohort
