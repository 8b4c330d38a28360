// data/shards/guarded_read.h — reading a memory-mapped shard that may shrink under the reader.
// Torch-free.
//
// A shard truncated while the job has it mapped (another process rewrote or cut the file) makes
// every load from a page past its new end raise SIGBUS, which kills the process with no word of
// which file. The reads of mapped shard bytes therefore go through these two functions: they
// install (once) a SIGBUS handler, arm a thread-local jump point around the copy, and when the
// fault lands inside an armed region the handler jumps back and the function returns false, so
// that the caller throws one line naming the shard (and ShardedDataset adds the rank).
//
// Why this design: checking the size with fstat before each read still races with a truncate
// between the check and the load, and reading with pread instead of the mapping would give up
// what the mapping is for (no copy into the process for the prefetcher, `dd`-speed reads, the page
// cache as the only buffer). The guard costs one sigsetjmp without a signal mask (no system call)
// per copy; the handler runs with SA_NODEFER, so jumping out of it leaves SIGBUS unblocked.
// A SIGBUS outside a guarded copy (not ours) goes to the handler that was there before, or to the
// default action (the process dies as it would have). A library that later replaces the handler
// without chaining to it turns a truncated shard back into a crash; nothing in cohort does.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::data {

/// Copies `n` bytes from a mapped file at `from` to `out`; false when a page of it is no longer
/// backed by the file (SIGBUS: the file was truncated), with `out` partly written.
bool guarded_copy(void* out, const void* from, size_t n);

/// Loads one byte per page of [from, from + n) (the prefetcher's reads); false on SIGBUS.
bool guarded_touch(const uint8_t* from, size_t n, size_t page);

}  // namespace cohort::data
