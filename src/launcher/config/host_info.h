// launcher/config/host_info.h — facts about this machine that the launcher's defaults depend on.
// No torch: GPUs are counted from the device nodes / CUDA_VISIBLE_DEVICES, not through CUDA.
#pragma once

#include <string>

namespace cohort::launcher {

/// CPU cores this process may run on (its affinity mask), at least 1.
int usable_cpu_count();

/// GPUs visible to workers: the entries of CUDA_VISIBLE_DEVICES when it is set, else the number of
/// /dev/nvidia<N> device nodes; 0 without CUDA.
int visible_gpu_count();

/// A TCP port that is free on `addr` right now (bind to port 0, read it back, close). Another
/// process may take it before the worker does; on one machine this is what torchrun does too.
/// Throws cohort::ConfigError when `addr` is not an address of this machine.
int pick_free_port(const std::string& addr);

}  // namespace cohort::launcher
