// FusedAdam's loop: one read of p, g, exp_avg, exp_avg_sq and one write of p, exp_avg, exp_avg_sq
// per element, instead of libtorch Adam's ~10 passes and its parameter-sized temporaries.
//
// Each line mirrors one of libtorch 1.13's tensor operations in adam.cpp / adamw.cpp, in its order
// of evaluation, so the result differs from torch::optim::Adam only where ATen's vectorised kernels
// fuse a multiply-add (a rounding, not a formula, difference):
//   AdamW:  p.mul_(1 - lr * wd)
//   Adam:   grad = grad.add(p, wd)
//           exp_avg.mul_(beta1).add_(grad, 1 - beta1)
//           exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//           [amsgrad: max_out(max_exp_avg_sq, exp_avg_sq, max_exp_avg_sq); use it below]
//           denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
//           p.addcdiv_(exp_avg, denom, -lr / bias_correction1)
// Built with -fno-math-errno (src/CMakeLists.txt): otherwise sqrtf must be able to set errno and
// GCC will not vectorise it. IEEE sqrt and division are exact in every instruction set, so the
// AVX2 and baseline clones give bitwise the same results.
#include "adam_kernel.h"

#include <cmath>

namespace cohort::detail {

namespace {

// Not under ThreadSanitizer: the clones' resolver runs while the dynamic loader relocates
// libcohort.so, before TSan's runtime is initialised, and an instrumented resolver crashes there
// (scripts/sanitize.sh tsan; the AVX2 clone is bitwise the baseline anyway).
template <bool kL2, bool kDecay, bool kAmsgrad>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("avx2", "default")))
#endif
void update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
            float* __restrict vmax, int64_t n, const AdamCoeffs c) {
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    if (kDecay) pi = pi * c.decay;
    float gi = g[i];
    if (kL2) gi = gi + c.l2 * pi;
    const float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    const float vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;  // addcmul: self + (value * t1) * t2
    m[i] = mi;
    v[i] = vi;
    float d = vi;
    if (kAmsgrad) {
      const float old = vmax[i];
      d = vi > old || vi != vi ? vi : old;  // torch.maximum: NaN wins from either side
      vmax[i] = d;
    }
    const float denom = std::sqrt(d) / c.sqrt_bias_correction2 + c.eps;
    p[i] = pi + c.neg_step_size * mi / denom;  // addcdiv: self + (value * t1) / t2
  }
}

}  // namespace

void adam_update(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamCoeffs& c) {
  const int variant = (c.use_l2 ? 1 : 0) | (c.use_decay ? 2 : 0) | (c.amsgrad ? 4 : 0);
  switch (variant) {
    case 0: return update<false, false, false>(p, g, m, v, vmax, n, c);
    case 1: return update<true, false, false>(p, g, m, v, vmax, n, c);
    case 2: return update<false, true, false>(p, g, m, v, vmax, n, c);
    case 3: return update<true, true, false>(p, g, m, v, vmax, n, c);
    case 4: return update<false, false, true>(p, g, m, v, vmax, n, c);
    case 5: return update<true, false, true>(p, g, m, v, vmax, n, c);
    case 6: return update<false, true, true>(p, g, m, v, vmax, n, c);
    default: return update<true, true, true>(p, g, m, v, vmax, n, c);
  }
}

}  // namespace cohort::detail
