// The epoch's order: block permutation, then a permutation inside each window. See global_order.h.
#include "data/shards/global_order.h"

#include <stdexcept>

namespace cohort::data {
namespace {

// splitmix64's finaliser: a bijective 64-bit mixer, good enough as a Feistel round function.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr int kRounds = 6;  // balanced Feistel: 4 rounds are a pseudo-random permutation; 2 more for margin
constexpr uint64_t kStageBlocks = 1, kStageWindow = 2;

}  // namespace

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;  // the domain 4^half_bits < 4n: under 4 walks on average
  mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t FeistelPermutation::round_fn(int round, uint64_t half) const {
  return mix64(key_ ^ mix64(half + (static_cast<uint64_t>(round) << 56))) & mask_;
}

uint64_t FeistelPermutation::step_forward(uint64_t x) const {
  uint64_t l = x >> half_bits_, r = x & mask_;
  for (int i = 0; i < kRounds; ++i) {
    const uint64_t next_r = l ^ round_fn(i, r);
    l = r;
    r = next_r;
  }
  return (l << half_bits_) | r;
}

uint64_t FeistelPermutation::step_inverse(uint64_t y) const {
  uint64_t l = y >> half_bits_, r = y & mask_;
  for (int i = kRounds - 1; i >= 0; --i) {
    const uint64_t prev_l = r ^ round_fn(i, l);
    r = l;
    l = prev_l;
  }
  return (l << half_bits_) | r;
}

// Cycle walking: apply the permutation of [0, 4^half) until the value falls inside [0, n). The
// walk from a value inside stays inside its cycle, so this is a permutation of [0, n) too.
uint64_t FeistelPermutation::forward(uint64_t x) const {
  if (n_ <= 1) return x;
  do x = step_forward(x); while (x >= n_);
  return x;
}

uint64_t FeistelPermutation::inverse(uint64_t y) const {
  if (n_ <= 1) return y;
  do y = step_inverse(y); while (y >= n_);
  return y;
}

GlobalOrder::GlobalOrder(uint64_t n, uint64_t seed, OrderOptions options) : n_(n), seed_(seed), options_(options) {
  if (n >= (uint64_t{1} << 62)) throw std::invalid_argument("an order of 2^62 samples or more");
  if (options.block == 0 || options.window_blocks == 0) throw std::invalid_argument("a block or window of 0 samples");
  if (options.block > (uint64_t{1} << 40) || options.window_blocks > (uint64_t{1} << 20)) {
    throw std::invalid_argument("a block over 2^40 samples or a window over 2^20 blocks");
  }
  blocks_ = n == 0 ? 0 : (n + options.block - 1) / options.block;
  last_block_ = n == 0 ? 0 : n - (blocks_ - 1) * options.block;
  window_ = options.block * options.window_blocks;
}

uint64_t GlobalOrder::key(uint64_t epoch, uint64_t stage, uint64_t index) const {
  return mix64(mix64(mix64(seed_ ^ 0x636f686f72744f52ULL) ^ epoch) ^ (stage << 60) ^ index);
}

uint64_t GlobalOrder::sample_at(uint64_t epoch, uint64_t k) const {
  if (k >= n_) throw std::out_of_range("position " + std::to_string(k) + " of an order of " + std::to_string(n_));
  if (!options_.shuffle) return k;
  // Stage 2 first (it acts on positions): mix inside the window.
  const uint64_t w = k / window_, base = w * window_;
  const uint64_t len = n_ - base < window_ ? n_ - base : window_;
  const uint64_t kb = base + FeistelPermutation(len, key(epoch, kStageWindow, w)).forward(k - base);
  // Stage 1: position kb in the sequence of permuted blocks; slot t holds block sigma(t).
  const uint64_t b = options_.block;
  const FeistelPermutation sigma(blocks_, key(epoch, kStageBlocks, 0));
  uint64_t t, off;
  if (last_block_ == b) {
    t = kb / b, off = kb % b;
  } else {
    const uint64_t ts = sigma.inverse(blocks_ - 1);  // the slot of the short block
    if (kb < ts * b) {
      t = kb / b, off = kb % b;
    } else if (kb < ts * b + last_block_) {
      t = ts, off = kb - ts * b;
    } else {
      const uint64_t shifted = kb + (b - last_block_);  // the slots after the short one start earlier
      t = shifted / b, off = shifted % b;
    }
  }
  return sigma.forward(t) * b + off;
}

uint64_t GlobalOrder::position_of(uint64_t epoch, uint64_t sample) const {
  if (sample >= n_) throw std::out_of_range("sample " + std::to_string(sample) + " of " + std::to_string(n_));
  if (!options_.shuffle) return sample;
  const uint64_t b = options_.block;
  const FeistelPermutation sigma(blocks_, key(epoch, kStageBlocks, 0));
  const uint64_t t = sigma.inverse(sample / b), off = sample % b;
  uint64_t kb = t * b + off;
  if (last_block_ != b && t > sigma.inverse(blocks_ - 1)) kb -= b - last_block_;
  const uint64_t w = kb / window_, base = w * window_;
  const uint64_t len = n_ - base < window_ ? n_ - base : window_;
  return base + FeistelPermutation(len, key(epoch, kStageWindow, w)).inverse(kb - base);
}

}  // namespace cohort::data
