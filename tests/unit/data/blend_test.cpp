// Blending (src/data/shards/blend.h): every prefix of positions holds each source's share to within
// one sample, at the start and 10^15 positions in, as a pure function of the position.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "data/shards/blend.h"

namespace cohort::data {
namespace {

void expect_exact_shares(const std::vector<uint64_t>& weights, uint64_t positions) {
  const Blend blend(weights);
  double total = 0;
  for (uint64_t w : weights) total += static_cast<double>(w);
  std::vector<uint64_t> drawn(weights.size(), 0);
  for (uint64_t p = 0; p < positions; ++p) {
    const size_t d = blend.source_at(p);
    ASSERT_EQ(blend.count_before(d, p), drawn[d]) << "position " << p << " is not source " << d << "'s next draw";
    ++drawn[d];
    if (p % 9973 == 0 || p + 1 == positions) {
      for (size_t s = 0; s < weights.size(); ++s) {
        const double exact = static_cast<double>(p + 1) * static_cast<double>(weights[s]) / total;
        ASSERT_LT(std::fabs(static_cast<double>(drawn[s]) - exact), 1.0) << "source " << s << " after " << p + 1;
      }
    }
  }
}

TEST(Blend, EveryPrefixHoldsTheWeightsToOneSample) {
  expect_exact_shares({7, 3}, 1000000);
  expect_exact_shares({5, 2, 1}, 300000);
  expect_exact_shares({1}, 1000);
  expect_exact_shares({999999, 1}, 300000);
}

TEST(Blend, IsExactDeepIntoAnInfiniteStream) {
  const Blend blend({70, 30});
  const uint64_t p = 1000000000000000ULL;  // 10^15 positions in: exact integer arithmetic, no drift
  EXPECT_EQ(blend.count_before(0, p), 700000000000000ULL);
  EXPECT_EQ(blend.count_before(1, p), 300000000000000ULL);
  const Blend odd({2, 1});
  EXPECT_EQ(odd.count_before(0, p + 1) + odd.count_before(1, p + 1), p + 1);
  EXPECT_LE(odd.count_before(0, p + 1) - (2 * (p + 1)) / 3, 1u);
}

TEST(Blend, RefusesWeightsItCannotHonour) {
  EXPECT_THROW(Blend({}), std::invalid_argument);
  EXPECT_THROW(Blend({3, 0}), std::invalid_argument);
  EXPECT_THROW(Blend({uint64_t{1} << 32, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace cohort::data
