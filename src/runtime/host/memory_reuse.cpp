#include "cohort/memory_reuse.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cohort {

namespace {

// The user's own malloc settings win over ours.
bool malloc_configured_by_environment() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

}  // namespace

bool retain_freed_memory() {
#if defined(__GLIBC__)
  if (malloc_configured_by_environment()) return false;
  // Both settings also turn off glibc's adaptive thresholds, which raise the mmap threshold only
  // after a big block was freed and still trim at twice that.
  constexpr int kMmapThreshold = 32 << 20;  // glibc's maximum on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
  constexpr int kTrimThreshold = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return false;
#endif
}

}  // namespace cohort
