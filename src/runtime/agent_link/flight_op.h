// runtime/agent_link/flight_op.h — a flight-recorder entry (flight_recorder.h) describing a collective on a
// tensor: its dtype, element count and bytes, and the backend its device goes to. Internal header.
#pragma once

#include <ATen/core/Tensor.h>

#include "flight_recorder.h"

namespace cohort::detail {

/// `op` and `what` must be string literals (the ring keeps the pointers).
inline FlightOp flight_op(const char* op, const char* what, int32_t index, const at::Tensor& t,
                          const char* backend = nullptr, bool gradient = false) {
  FlightOp f;
  f.op = op;
  f.what = what;
  f.index = index;
  f.backend = backend ? backend : (t.is_cuda() ? "nccl" : "gloo");
  f.dtype = c10::toString(t.scalar_type());  // a static name: "Float", "Long", ...
  f.numel = t.numel();
  f.bytes = static_cast<int64_t>(t.nbytes());
  f.gradient = gradient;
  return f;
}

}  // namespace cohort::detail
