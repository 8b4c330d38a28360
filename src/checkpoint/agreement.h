// checkpoint/agreement.h — how the ranks of a save or a restore agree: one int64 reduced over the
// job's CPU group (a no-op in a world of one).
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>

namespace cohort {
class Context;
namespace ckpt {

int64_t allreduce_int(Context& ctx, int64_t value, c10d::ReduceOp op);

}  // namespace ckpt
}  // namespace cohort
