// cohort/torch_compat.h — the differences between libtorch 1.13 and 2.x, in one place.
//
// 1.13: collectives live on c10d::ProcessGroup, and ProcessGroupGloo derives from it.
// 2.x:  c10d::ProcessGroup dispatches to a c10d::Backend; ProcessGroupGloo / ProcessGroupNCCL are
//       Backends with the same allreduce/broadcast/allgather/barrier signatures.
// cohort calls the Gloo / NCCL object directly through `cohort::Backend`, which is the common base.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace cohort {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif
using WorkHandle = c10::intrusive_ptr<c10d::Work>;

}  // namespace cohort
