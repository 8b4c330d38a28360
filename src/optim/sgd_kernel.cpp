// FusedSGD's loop: one read of p, g, buf and one write of p and buf per element.
//
// Each line mirrors one of libtorch 1.13's tensor operations in sgd.cpp, in order:
//   d_p = d_p.add(p, weight_decay)                  [weight decay]
//   buf = clone(d_p)                                [first step]
//   buf.mul_(momentum).add_(d_p, 1 - dampening)     [later steps]
//   d_p = d_p.add(buf, momentum)  or  d_p = buf     [Nesterov or not]
//   p.add_(d_p, -lr)
// ATen computes `a.add(b, alpha)` as fmadd(b, alpha, a) in its vectorised kernels, so each add
// with alpha here is one fused multiply-add: bitwise ATen's result where the CPU has FMA. Built
// with -ffp-contract=off (src/CMakeLists.txt) so the compiler fuses nothing else, such as the
// momentum product into the add that follows it, which ATen rounds separately.
#include "sgd_kernel.h"

#include <cmath>

namespace cohort::detail {

namespace {

template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
inline __attribute__((always_inline)) void update_body(float* __restrict p, const float* __restrict g,
                                                       float* __restrict buf, int64_t n, const SgdCoeffs& c) {
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    float d = g[i];
    if (kDecay) d = std::fma(pi, c.weight_decay, d);
    if (kMomentum) {
      float b;
      if (kFirst) {
        b = d;
      } else {
        const float scaled = buf[i] * c.momentum;
        b = std::fma(d, c.one_minus_dampening, scaled);
      }
      buf[i] = b;
      d = kNesterov ? std::fma(b, c.momentum, d) : b;
    }
    p[i] = std::fma(d, c.neg_lr, pi);
  }
}

// Where the CPU has AVX2 and FMA the loop vectorises with fused multiply-add instructions; the
// baseline build's std::fma is a library call per element (correct, and slow).
template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma")))
#endif
void update_fma(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, const SgdCoeffs c) {
  update_body<kDecay, kMomentum, kNesterov, kFirst>(p, g, buf, n, c);
}

template <bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
void update(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n, const SgdCoeffs c) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (fma) return update_fma<kDecay, kMomentum, kNesterov, kFirst>(p, g, buf, n, c);
#endif
  update_body<kDecay, kMomentum, kNesterov, kFirst>(p, g, buf, n, c);
}

}  // namespace

void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdCoeffs& c) {
  const bool decay = c.weight_decay != 0, momentum = c.momentum != 0;
  if (!momentum) return decay ? update<true, false, false, false>(p, g, buf, n, c)
                              : update<false, false, false, false>(p, g, buf, n, c);
  const int variant = (decay ? 1 : 0) | (c.nesterov ? 2 : 0) | (c.first ? 4 : 0);
  switch (variant) {
    case 0: return update<false, true, false, false>(p, g, buf, n, c);
    case 1: return update<true, true, false, false>(p, g, buf, n, c);
    case 2: return update<false, true, true, false>(p, g, buf, n, c);
    case 3: return update<true, true, true, false>(p, g, buf, n, c);
    case 4: return update<false, true, false, true>(p, g, buf, n, c);
    case 5: return update<true, true, false, true>(p, g, buf, n, c);
    case 6: return update<false, true, true, true>(p, g, buf, n, c);
    default: return update<true, true, true, true>(p, g, buf, n, c);
  }
}

}  // namespace cohort::detail
