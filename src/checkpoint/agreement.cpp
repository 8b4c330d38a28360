#include "checkpoint/agreement.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "cohort/context.h"

namespace cohort {

int64_t ckpt::allreduce_int(Context& ctx, int64_t value, c10d::ReduceOp op) {
  if (ctx.world_size() == 1) return value;
  std::vector<at::Tensor> t{at::scalar_tensor(value, at::kLong).reshape({1})};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  ctx.group()->allreduce(t, opts)->wait();
  return t[0].item<int64_t>();
}

}  // namespace cohort
