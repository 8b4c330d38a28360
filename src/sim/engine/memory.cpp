// ZeRO's memory formulas (see memory.h).
#include "memory.h"

namespace cohort::sim {

Memory memory_per_worker(const Params& p, int world) {
  const double n = world > 0 ? world : 1;
  const double P = p.params;
  Memory m;
  m.params = P * p.bytes_per_param / (p.zero_level >= 3 ? n : 1);
  m.grads = P * p.bytes_per_grad / (p.zero_level >= 2 ? n : 1);
  m.optimizer = P * p.optimizer_bytes_per_param / (p.zero_level >= 1 ? n : 1);
  m.activations = p.batch_per_worker * p.activation_bytes_per_sample;
  return m;
}

double checkpoint_bytes_per_worker(const Params& p, int world) {
  const double total = p.params * (p.bytes_per_param + p.optimizer_bytes_per_param);
  if (!p.checkpoint_sharded) return total;  // rank 0 writes all (the others wait for it)
  return total / (world > 0 ? world : 1);
}

}  // namespace cohort::sim
