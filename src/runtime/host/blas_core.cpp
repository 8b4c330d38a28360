// When to choose OpenBLAS's kernels for it. See blas_core.h.
#include "blas_core.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>

namespace cohort::detail {

CpuFeatures this_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

std::optional<std::string> openblas_core_for(const CpuFeatures& c) {
  // The instructions each of OpenBLAS's kernel sets uses (its kernel/x86_64 sources).
  const bool skylakex = c.avx2 && c.fma && c.avx512f && c.avx512cd && c.avx512bw && c.avx512dq && c.avx512vl;
  if (skylakex && c.avx512bf16) return "Cooperlake";
  if (skylakex) return "SkylakeX";
  if (c.avx2 && c.fma) return "Haswell";
  return std::nullopt;
}

std::optional<std::string> openblas_core_upgrade(const std::string& loaded_core,
                                                 const std::optional<std::string>& better) {
  // gotoblas_dynamic_init() takes Prescott for any x86-64 CPU it cannot place.
  if (strcasecmp(loaded_core.c_str(), "Prescott") != 0) return std::nullopt;
  return better;
}

namespace {
// openblas_get_corename() of the OpenBLAS behind `handle` (a dlopen handle, or RTLD_DEFAULT).
std::optional<std::string> core_name(void* handle) {
  auto fn = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  const char* name = fn ? fn() : nullptr;
  return name ? std::optional<std::string>(name) : std::nullopt;
}
}  // namespace

std::optional<std::string> loaded_openblas_core() { return core_name(RTLD_DEFAULT); }

std::optional<std::string> openblas_core_for_workers() {
  if (std::getenv("OPENBLAS_CORETYPE")) return std::nullopt;  // the user's choice
  const auto better = openblas_core_for(this_cpu_features());
  if (!better) return std::nullopt;
  // One thread: OpenBLAS's pthread build starts its thread pool when it loads. The variable is
  // restored right after (the caller has no other thread that could read it meanwhile).
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string saved = threads ? threads : "";
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (threads) setenv("OPENBLAS_NUM_THREADS", saved.c_str(), 1); else unsetenv("OPENBLAS_NUM_THREADS");
  if (!lib) return std::nullopt;
  const std::optional<std::string> loaded = core_name(lib);
  dlclose(lib);
  return loaded ? openblas_core_upgrade(*loaded, better) : std::nullopt;
}

}  // namespace cohort::detail
