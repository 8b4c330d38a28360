// runtime/context_internals.h — what cohort's own parts use of a Context beyond its public API.
#pragma once

#include <cstdint>

#include "cohort/context.h"

namespace cohort::detail {

struct ContextInternals {
  /// The shared-memory allreduce for CPU tensors when all ranks share this machine, else nullptr.
  static ShmAllreduce* shm_allreduce(const Context& ctx) { return ctx.shm_.get(); }
  /// A number unique within the job for objects created in the same order on every rank (a DDP
  /// module, a checkpoint), used to keep their store keys apart.
  static int64_t next_sequence(Context& ctx) { return ctx.sequence_++; }
};

}  // namespace cohort::detail
