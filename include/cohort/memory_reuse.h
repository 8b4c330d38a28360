// cohort/memory_reuse.h — keep freed tensor memory in the process for the next step.
#pragma once

namespace cohort {

/// Makes glibc's malloc keep the memory a training step frees for the next step instead of giving
/// it back to the kernel. By default glibc maps big blocks afresh and trims the heap's free top, so
/// each step's activations and gradients are page-faulted and cleared by the kernel again: 12-18%
/// of a CNN step on this project's build machine, and more with several ranks per machine, whose
/// page faults contend in the kernel (docs/BENCHMARKS.md, issue 2). Afterwards blocks up to 32 MiB
/// (glibc's maximum) come from the heap, and the heap is trimmed only past 1 GiB free at its top.
/// The cost: the process keeps its peak heap, as PyTorch's CUDA caching allocator keeps GPU memory.
///
/// cohort::init() calls it unless InitOptions::retain_freed_memory is false or
/// COHORT_RETAIN_FREED_MEMORY=0. It changes nothing, and returns false, when the environment already
/// configures malloc (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or glibc.malloc tunables in
/// GLIBC_TUNABLES), or where the C library is not glibc.
bool retain_freed_memory();

}  // namespace cohort
