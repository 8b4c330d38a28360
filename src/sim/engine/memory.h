// Memory per worker under DDP and the ZeRO levels, from the ZeRO paper's formulas (Rajbhandari et
// al. 2020, section 5): with P parameters, N workers and bytes per parameter for the parameters
// (p), gradients (g) and optimizer state (o):
//   DDP (0): P(p+g+o)      ZeRO-1: P(p+g) + Po/N      ZeRO-2: Pp + P(g+o)/N      ZeRO-3: P(p+g+o)/N
// plus the activations of the worker's batch. No torch.
#pragma once

#include "params.h"

namespace cohort::sim {

struct Memory {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  double activations = 0;
  double total() const { return params + grads + optimizer + activations; }
};

Memory memory_per_worker(const Params& p, int world);

/// Bytes one worker's checkpoint holds (its parameters and optimizer state, or its share).
double checkpoint_bytes_per_worker(const Params& p, int world);

}  // namespace cohort::sim
