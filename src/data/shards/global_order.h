// data/shards/global_order.h — the order of an epoch as a pure function of (seed, epoch, position):
// no I/O, no state, nothing materialised. Resuming is a seek: sample_at(epoch, 10^9) costs what
// sample_at(epoch, 0) costs. Torch-free. The math is in docs/data.md ("The order").
//
// Two stages, each a bijection on [0, n), so their composition is a permutation of the samples:
//  1. blocks: the samples are cut into blocks of `block` consecutive samples (the last may be
//     shorter); a keyed permutation of the blocks lays them out one after the other. Reads stay
//     sequential inside a block, and the shuffle crosses shards (blocks span the global index).
//  2. windows: positions are grouped in windows of block × window_blocks; a keyed permutation of
//     each window mixes the samples of its blocks. A data set smaller than a window is fully shuffled.
// Both permutations are Feistel networks on the next power of four with cycle walking, keyed by
// (seed, epoch, stage, window): a fresh permutation every epoch, invertible (position_of).
#pragma once

#include <cstdint>

namespace cohort::data {

/// How an epoch's order is shuffled.
struct OrderOptions {
  uint64_t block = 4096;        ///< consecutive samples read together (sequential reads)
  uint64_t window_blocks = 8;   ///< blocks whose samples are mixed together
  bool shuffle = true;          ///< false: the order is 0, 1, 2, ... every epoch
};

/// A keyed permutation of [0, n) (a Feistel network with cycle walking). O(1) per call.
class FeistelPermutation {
 public:
  FeistelPermutation(uint64_t n, uint64_t key);
  uint64_t forward(uint64_t x) const;  ///< x < n
  uint64_t inverse(uint64_t y) const;  ///< y < n; inverse(forward(x)) == x
 private:
  uint64_t round_fn(int round, uint64_t half) const;
  uint64_t step_forward(uint64_t x) const;
  uint64_t step_inverse(uint64_t y) const;
  uint64_t n_;
  uint64_t key_;
  int half_bits_;
  uint64_t mask_;
};

/// The order of every epoch over n samples.
class GlobalOrder {
 public:
  /// Throws std::invalid_argument for n ≥ 2^62, a zero block or window.
  GlobalOrder(uint64_t n, uint64_t seed, OrderOptions options = {});
  /// The sample at position k (< size()) of epoch `epoch`.
  uint64_t sample_at(uint64_t epoch, uint64_t k) const;
  /// The position of `sample` (< size()) in epoch `epoch`: sample_at's inverse.
  uint64_t position_of(uint64_t epoch, uint64_t sample) const;
  uint64_t size() const { return n_; }
  const OrderOptions& options() const { return options_; }

 private:
  uint64_t key(uint64_t epoch, uint64_t stage, uint64_t index) const;
  uint64_t n_;
  uint64_t seed_;
  OrderOptions options_;
  uint64_t blocks_;      // ceil(n / block)
  uint64_t last_block_;  // samples in the last block, 1..block
  uint64_t window_;      // samples per window
};

}  // namespace cohort::data
