// The epoch's order (src/data/shards/global_order.h): a permutation for every size, block and
// window, fresh every epoch, invertible, block-local, and a seek deep into a huge index.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "data/shards/global_order.h"

namespace cohort::data {
namespace {

// Every position maps to a distinct sample, and position_of inverts sample_at.
void expect_permutation(uint64_t n, OrderOptions o, uint64_t seed, uint64_t epoch) {
  const GlobalOrder order(n, seed, o);
  std::vector<char> seen(n, 0);
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t s = order.sample_at(epoch, k);
    ASSERT_LT(s, n) << "n=" << n << " block=" << o.block << " window=" << o.window_blocks << " k=" << k;
    ASSERT_FALSE(seen[s]) << "sample " << s << " twice; n=" << n << " block=" << o.block << " window=" << o.window_blocks;
    seen[s] = 1;
    ASSERT_EQ(order.position_of(epoch, s), k) << "n=" << n << " block=" << o.block;
  }
}

TEST(GlobalOrder, IsAPermutationForEverySizeBlockAndWindow) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 1023, 4097}) {
    for (uint64_t block : {1, 3, 8, 64, 5000}) {
      for (uint64_t window : {1, 2, 5}) {
        expect_permutation(n, {block, window, true}, 42, 3);
      }
    }
  }
}

TEST(GlobalOrder, FeistelPermutesEverySmallDomain) {
  for (uint64_t n = 1; n < 300; ++n) {
    const FeistelPermutation p(n, 0x1234 + n);
    std::set<uint64_t> out;
    for (uint64_t x = 0; x < n; ++x) {
      const uint64_t y = p.forward(x);
      ASSERT_LT(y, n);
      out.insert(y);
      ASSERT_EQ(p.inverse(y), x);
    }
    ASSERT_EQ(out.size(), n);
  }
}

TEST(GlobalOrder, IsFreshEachEpochAndAFunctionOfSeedAndEpoch) {
  const uint64_t n = 5000;
  const GlobalOrder a(n, 7, {64, 4, true}), again(n, 7, {64, 4, true}), other_seed(n, 8, {64, 4, true});
  int same_epochs = 0, same_seed = 0, fixed = 0;
  for (uint64_t k = 0; k < n; ++k) {
    EXPECT_EQ(a.sample_at(2, k), again.sample_at(2, k));  // a pure function: nothing carried between calls
    same_epochs += a.sample_at(0, k) == a.sample_at(1, k);
    same_seed += a.sample_at(0, k) == other_seed.sample_at(0, k);
    fixed += a.sample_at(0, k) == k;
  }
  EXPECT_LT(same_epochs, 50);  // a fresh permutation each epoch: few coincidences (about 1 expected)
  EXPECT_LT(same_seed, 50);
  EXPECT_LT(fixed, 50);        // actually shuffled
}

TEST(GlobalOrder, WithoutShuffleIsTheIdentity) {
  const GlobalOrder order(1000, 5, {16, 2, false});
  for (uint64_t k = 0; k < 1000; ++k) ASSERT_EQ(order.sample_at(4, k), k);
}

TEST(GlobalOrder, ShufflesAcrossBlocksButReadsStayInFewBlocksPerWindow) {
  // 100,000 samples in blocks of 100, windows of 4 blocks: a window's 400 positions come from at
  // most 5 blocks (4, or 5 when the short last block shifts the slots), and those blocks are spread
  // over the whole index (across shards).
  const uint64_t n = 100000, block = 100;
  const GlobalOrder order(n, 99, {block, 4, true});
  for (uint64_t w = 0; w < n / 400; ++w) {
    std::set<uint64_t> blocks;
    for (uint64_t k = w * 400; k < (w + 1) * 400; ++k) blocks.insert(order.sample_at(0, k) / block);
    ASSERT_LE(blocks.size(), 5u) << "window " << w;
  }
  std::set<uint64_t> first_window_blocks;
  for (uint64_t k = 0; k < 400; ++k) first_window_blocks.insert(order.sample_at(0, k) / block);
  EXPECT_GT(*first_window_blocks.rbegin() - *first_window_blocks.begin(), 10u);  // not neighbours: shuffled across
}

TEST(GlobalOrder, SeeksToPositionOneBillionOfATrillionSamples) {
  // A synthetic index of 10^12 samples: nothing is materialised, so the seek is a few hashes.
  const uint64_t n = 1000000000000ULL, deep = 1000000000ULL;
  const GlobalOrder order(n, 2026, {4096, 8, true});
  std::set<uint64_t> seen;
  for (uint64_t k = deep; k < deep + 2000; ++k) {
    const uint64_t s = order.sample_at(5, k);
    ASSERT_LT(s, n);
    ASSERT_TRUE(seen.insert(s).second) << "sample " << s << " twice";
    ASSERT_EQ(order.position_of(5, s), k);
  }
  // Same block structure deep in: 2000 positions from one window touch at most 9 blocks.
  std::set<uint64_t> blocks;
  for (uint64_t s : seen) blocks.insert(s / 4096);
  EXPECT_LE(blocks.size(), 9u);
}

TEST(GlobalOrder, RefusesWhatItCannotOrder) {
  EXPECT_THROW(GlobalOrder(uint64_t{1} << 62, 0), std::invalid_argument);
  EXPECT_THROW(GlobalOrder(10, 0, {0, 1, true}), std::invalid_argument);
  EXPECT_THROW(GlobalOrder(10, 0).sample_at(0, 10), std::out_of_range);
}

}  // namespace
}  // namespace cohort::data
