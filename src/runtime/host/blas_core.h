// OpenBLAS chooses its kernels (its "core") for the CPU model when it loads. One that does not know
// the model falls back to its generic x86-64 kernels, "Prescott" (SSE3): Debian 12's OpenBLAS 0.3.21
// does that on Intel's Emerald Rapids (family 6, model 207), where its own AVX-512 kernels make the
// linear layers of a small MLP about 3x faster (docs/BENCHMARKS.md, issue 2). OPENBLAS_CORETYPE,
// read when the library loads, chooses the kernels instead — so only a launcher can set it for a
// process. These helpers decide when that is worth doing: only when OpenBLAS fell back, never over
// a choice OpenBLAS made for a CPU it knows, nor over the user's own OPENBLAS_CORETYPE.
// Internal header (cohort_base: no torch, so the launcher uses it too).
#pragma once

#include <optional>
#include <string>

namespace cohort::detail {

/// The instruction-set extensions the choice depends on.
struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512bf16 = false;
};

/// This CPU's features (all false off x86-64).
CpuFeatures this_cpu_features();

/// The most capable OpenBLAS core a CPU with these features runs: "Cooperlake" (AVX-512 with BF16),
/// "SkylakeX" (AVX-512 F, CD, BW, DQ, VL), "Haswell" (AVX2 and FMA); nullopt for less.
std::optional<std::string> openblas_core_for(const CpuFeatures& cpu);

/// `better` when `loaded_core` is OpenBLAS's generic fallback ("Prescott", any case) and a better
/// core exists; nullopt otherwise.
std::optional<std::string> openblas_core_upgrade(const std::string& loaded_core,
                                                 const std::optional<std::string>& better);

/// The core of the OpenBLAS already loaded in this process (openblas_get_corename); nullopt without one.
std::optional<std::string> loaded_openblas_core();

/// For a launcher, before it starts workers: the OPENBLAS_CORETYPE value to give them, or nullopt
/// when OPENBLAS_CORETYPE is already set, when this machine has no libopenblas.so.0, or when OpenBLAS
/// knows this CPU. It loads libopenblas.so.0 with one thread to ask it (about 4 ms) and unloads it.
/// It sets OPENBLAS_NUM_THREADS for that moment: call it while the process runs no other thread.
std::optional<std::string> openblas_core_for_workers();

}  // namespace cohort::detail
