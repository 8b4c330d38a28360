// Ring reduce-scatter over point-to-point send/recv — for backends without a reduce_scatter of
// their own (torch 1.13's Gloo). Internal.
//
// `flat` holds W chunks of equal length; afterwards chunk r of rank r holds the sum of every rank's
// chunk r (the other chunks hold partial sums: scratch). In step s = 0 .. W-2, rank r sends chunk
// (r-1-s) mod W to rank r+1 and adds what rank r-1 sends into chunk (r-2-s) mod W: each chunk's
// partial sum travels W-1 hops and collects every rank's part, ending on its owner.
// Cost per rank: (W-1)/W of the bytes sent and as many received, W-1 latencies, (W-1)/W adds —
// the same bytes as the first half of a ring allreduce. Summation order differs between chunks,
// so the result is not bitwise what an allreduce gives (it is within float rounding).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "cohort/torch_compat.h"

namespace cohort::detail {

/// Blocking. `tag` must be the same on every rank for one call and differ between calls in flight.
void ring_reduce_scatter(Backend& group, int rank, int world, at::Tensor& flat, uint32_t tag);

}  // namespace cohort::detail
