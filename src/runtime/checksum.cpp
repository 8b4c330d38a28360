#include "cohort/checksum.h"

#include <torch/nn/module.h>
#include <xxhash.h>

#include <cstdio>

namespace cohort {

uint64_t tensors_hash(const std::vector<at::Tensor>& tensors) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (const auto& t : tensors) {
    auto c = t.detach().to(at::kCPU).contiguous();
    XXH64_update(state, c.data_ptr(), c.nbytes());
  }
  const uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

std::string parameters_checksum(const torch::nn::Module& module) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(tensors_hash(module.parameters())));
  return hex;
}

}  // namespace cohort
