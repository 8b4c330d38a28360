// A Gloo process group over some of the job's ranks (internal): hierarchical allreduce's group of
// the ranks with the same local rank, one per node.
#pragma once

#include <string>

#include "cohort/context.h"

namespace cohort::detail {

/// Every rank of the subgroup calls this with the same `prefix` (unique in the job) and its own
/// `rank` in 0..size-1. The same network device and timeout as the job's own group. Null where
/// this build has no Gloo. Throws CommError when the members cannot connect.
c10::intrusive_ptr<Backend> make_cpu_subgroup(const Context& ctx, const std::string& prefix, int rank, int size);

}  // namespace cohort::detail
