// data/shards/blend.h — several data sets drawn from with integer weights (70:30 prose and code),
// as a pure function of the position: no state beyond it, O(sources) per call. Torch-free.
//
// With cumulative weights S_0 = 0 < S_1 < ... < S_D = S, source d owns
//   C_d(P) = floor(P · S_{d+1} / S) − floor(P · S_d / S)
// of the positions [0, P): the counts sum to P (the floors telescope) and each is within 1 of
// P · w_d / S for every prefix — the ratios are exact to 1 sample, at any length. Position P draws
// from the source whose count steps up between P and P + 1, and is that source's C_d(P)-th draw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::data {

/// The interleaving of weighted sources.
class Blend {
 public:
  /// Throws std::invalid_argument for no source, a zero weight, or weights summing over 2^32.
  explicit Blend(std::vector<uint64_t> weights);
  /// The source position `position` draws from.
  size_t source_at(uint64_t position) const;
  /// How many of the positions [0, position) draw from `source`: C_d(P).
  uint64_t count_before(size_t source, uint64_t position) const;
  size_t sources() const { return cumulative_.size() - 1; }

 private:
  uint64_t floor_share(uint64_t position, size_t boundary) const;
  std::vector<uint64_t> cumulative_;  // S_0 .. S_D
};

}  // namespace cohort::data
