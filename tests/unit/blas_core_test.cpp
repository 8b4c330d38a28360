// Which OpenBLAS kernels a CPU runs, and when cohort chooses them instead of OpenBLAS
// (runtime/host/blas_core.h). The process-level behaviour is in init_test and launcher_env_test.
#include <gtest/gtest.h>

#include "runtime/host/blas_core.h"

namespace {

using cohort::detail::CpuFeatures;
using cohort::detail::openblas_core_for;
using cohort::detail::openblas_core_upgrade;

CpuFeatures avx512(bool bf16) {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512cd = f.avx512bw = f.avx512dq = f.avx512vl = true;
  f.avx512bf16 = bf16;
  return f;
}

TEST(BlasCore, TheMostCapableKernelsTheCpuRuns) {
  EXPECT_EQ(openblas_core_for(avx512(true)), "Cooperlake");  // Cooper Lake, Sapphire/Emerald Rapids
  EXPECT_EQ(openblas_core_for(avx512(false)), "SkylakeX");   // Skylake-SP, Cascade Lake, Ice Lake
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = true;
  EXPECT_EQ(openblas_core_for(avx2), "Haswell");
  CpuFeatures partial = avx512(true);
  partial.avx512vl = false;  // a Knights Landing-like set: not SkylakeX's
  EXPECT_EQ(openblas_core_for(partial), "Haswell");
  CpuFeatures no_fma;
  no_fma.avx2 = true;
  EXPECT_EQ(openblas_core_for(no_fma), std::nullopt);
  EXPECT_EQ(openblas_core_for(CpuFeatures{}), std::nullopt);
}

TEST(BlasCore, OnlyTheGenericFallbackIsReplaced) {
  EXPECT_EQ(openblas_core_upgrade("Prescott", "Cooperlake"), "Cooperlake");
  EXPECT_EQ(openblas_core_upgrade("prescott", "Haswell"), "Haswell");
  EXPECT_EQ(openblas_core_upgrade("Prescott", std::nullopt), std::nullopt);  // nothing better runs here
  // A core OpenBLAS chose for a CPU it knows stays, even where a wider one would run.
  EXPECT_EQ(openblas_core_upgrade("Haswell", "Cooperlake"), std::nullopt);
  EXPECT_EQ(openblas_core_upgrade("Zen", "SkylakeX"), std::nullopt);
  EXPECT_EQ(openblas_core_upgrade("SapphireRapids", "Cooperlake"), std::nullopt);
}

}  // namespace
