// The simulator's random numbers: xoshiro256** (Blackman & Vigna), seeded by splitmix64, so a seed
// gives the same run on every platform (the C++ CLI and the WebAssembly page agree bit for bit,
// which <random>'s distributions do not promise). No torch.
#pragma once

#include <cmath>
#include <cstdint>

namespace cohort::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1]: safe under log().
  double uniform_open() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

  /// A cheap standard normal: the sum of four 16-bit uniforms (Irwin-Hall), scaled to unit variance.
  /// Its tails stop at +-3.46 sigma, which is what the per-worker compute noise needs (one 64-bit
  /// draw per worker per step is what makes 10,000 workers fast).
  double fast_normal() {
    const uint64_t r = next();
    const double sum = static_cast<double>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    return (sum * (1.0 / 65536.0) - 2.0) * 1.7320508075688772;
  }

  double exponential(double mean) { return -mean * std::log(uniform_open()); }

  /// Weibull with this shape and the given mean (scale = mean / Gamma(1 + 1/shape)).
  double weibull(double shape, double mean) {
    const double scale = mean / std::tgamma(1.0 + 1.0 / shape);
    return scale * std::pow(-std::log(uniform_open()), 1.0 / shape);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace cohort::sim
