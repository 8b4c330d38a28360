// The shared-memory allgather (each rank copies its shard in and the others' out) against the
// reference it replaced (zero the unit, write the own shard, shared-memory sum): bitwise the same
// unit on every rank, at W = 3 (which divides neither the slot nor the unit sizes' factors),
// over many chunks, for floats and doubles, with stale or NaN values in the parts being gathered
// and allreduces interleaved (they share the double-buffered slots).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "parallel/shard_collectives.h"
#include "support/thread_ranks.h"

namespace {

using namespace cohort::testing;
using cohort::AllgatherAlgo;
using cohort::ReduceScatterAlgo;

// Rank r's shard of a padded unit of `world * part` elements, the same on every call.
torch::Tensor shard_of(int r, int64_t part, torch::ScalarType dtype, int round) {
  auto gen = at::detail::createCPUGenerator(500 + 17 * r + round);
  return torch::randn({part}, gen).to(dtype);
}

// Gathers with `algo` on every rank; returns each rank's units (rounds x dtypes, in order).
std::vector<std::vector<torch::Tensor>> gather_all(int world, AllgatherAlgo algo, int64_t part, size_t slot_bytes) {
  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> out(world);
  RankOptions options{.same_machine = true};
  options.init.shm_slot_bytes = slot_bytes;
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    ASSERT_NE(ctx->shm_allreduce(), nullptr);
    const int r = ctx->rank();
    cohort::detail::ShardCollectives coll(ctx->group(torch::kCPU), ctx->shm_allreduce(), r, world,
                                          ReduceScatterAlgo::ring, algo);
    ASSERT_EQ(coll.allgather_algo(), algo);
    std::vector<torch::Tensor> mine;
    for (int round = 0; round < 3; ++round) {
      for (auto dtype : {torch::kFloat, torch::kDouble}) {
        // Stale contents in the other parts: the last round's values, or NaN.
        auto full = round == 1 ? torch::full({world * part}, NAN, torch::TensorOptions().dtype(dtype))
                               : torch::randn({world * part}).to(dtype);
        coll.allgather(shard_of(r, part, dtype, round), full);
        mine.push_back(full);
        auto sum = torch::ones({part + 5}, torch::TensorOptions().dtype(dtype));  // an allreduce in between
        coll.allreduce(sum, 1.0, false);
        EXPECT_TRUE(torch::equal(sum, torch::full_like(sum, world)));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out[r] = mine;
  }, options);
  return out;
}

TEST(ShardAllgather, ShmIsBitwiseTheReferenceOnEveryRank) {
  const int world = 3;
  for (auto [part, slot] : std::vector<std::pair<int64_t, size_t>>{{10007, 4096}, {5, 4096}, {70000, 1 << 20}}) {
    SCOPED_TRACE("part " + std::to_string(part) + " slot " + std::to_string(slot));
    const auto fast = gather_all(world, AllgatherAlgo::shm, part, slot);
    const auto reference = gather_all(world, AllgatherAlgo::shm_allreduce, part, slot);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(fast[r].size(), reference[r].size());
      for (size_t i = 0; i < fast[r].size(); ++i) {
        EXPECT_TRUE(torch::equal(fast[r][i], reference[r][i])) << "rank " << r << " unit " << i;
        // And both are the shards end to end.
        const auto dtype = fast[r][i].scalar_type();
        std::vector<torch::Tensor> parts;
        for (int k = 0; k < world; ++k) parts.push_back(shard_of(k, part, dtype, static_cast<int>(i / 2)));
        EXPECT_TRUE(torch::equal(fast[r][i], torch::cat(parts))) << "rank " << r << " unit " << i;
      }
    }
  }
}

}  // namespace
