// Weighted interleaving of sources as a pure function of the position. See blend.h.
#include "data/shards/blend.h"

#include <stdexcept>

namespace cohort::data {

Blend::Blend(std::vector<uint64_t> weights) {
  if (weights.empty()) throw std::invalid_argument("a blend of no data set");
  cumulative_.push_back(0);
  for (uint64_t w : weights) {
    if (w == 0) throw std::invalid_argument("a blend weight of 0");
    if (w > (uint64_t{1} << 32) || cumulative_.back() + w > (uint64_t{1} << 32)) {
      throw std::invalid_argument("blend weights that sum to more than 2^32");
    }
    cumulative_.push_back(cumulative_.back() + w);
  }
}

// floor(P · S_boundary / S) in 128-bit arithmetic: exact for any position below 2^64.
uint64_t Blend::floor_share(uint64_t position, size_t boundary) const {
  const unsigned __int128 p = position;
  return static_cast<uint64_t>(p * cumulative_[boundary] / cumulative_.back());
}

uint64_t Blend::count_before(size_t source, uint64_t position) const {
  return floor_share(position, source + 1) - floor_share(position, source);
}

size_t Blend::source_at(uint64_t position) const {
  for (size_t d = 0; d + 1 < cumulative_.size(); ++d) {
    if (count_before(d, position + 1) != count_before(d, position)) return d;
  }
  return cumulative_.size() - 2;  // unreachable: the counts of P + 1 sum to one more than those of P
}

}  // namespace cohort::data
