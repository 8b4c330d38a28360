// The shared-memory allgather and reduce-scatter against the paths they replaced, at W = 3 (which
// divides neither the slot nor the parts), over many chunks, floats and doubles, with other
// operations interleaved (they share the double-buffered slots):
//  - allgather `shm` (each rank copies its shard in and the others' out) is bitwise the reference
//    (zero the unit, write the own shard, shared-memory sum) and the shards end to end, whatever
//    stale or NaN values the gathered parts held;
//  - reduce-scatter `shm` (pieces in, own part summed straight out) is bitwise allreduce_slice's
//    result, also when the output is the input's own part (level 1), and close to the ring's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "parallel/sharded/shard_collectives.h"
#include "support/thread_ranks.h"
#include "runtime/context_internals.h"

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
    ASSERT_NE(cohort::detail::ContextInternals::shm_allreduce(*ctx), nullptr);
    const int r = ctx->rank();
    cohort::detail::ShardCollectives coll(ctx->group(torch::kCPU), cohort::detail::ContextInternals::shm_allreduce(*ctx), r, world,
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

// Rank r's gradients for round `round`.
torch::Tensor grads_of(int r, int64_t n, torch::ScalarType dtype, int round) {
  auto gen = at::detail::createCPUGenerator(900 + 31 * r + round);
  return torch::randn({n}, gen).to(dtype);
}

// Reduce-scatters with `algo` on every rank, into a separate tensor and into the input's own part;
// returns each rank's outputs in order.
std::vector<std::vector<torch::Tensor>> reduce_scatter_all(int world, ReduceScatterAlgo algo, int64_t part,
                                                           size_t slot_bytes) {
  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> out(world);
  RankOptions options{.same_machine = true};
  options.init.shm_slot_bytes = slot_bytes;
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::detail::ShardCollectives coll(ctx->group(torch::kCPU), cohort::detail::ContextInternals::shm_allreduce(*ctx), r, world, algo,
                                          AllgatherAlgo::shm);
    ASSERT_EQ(coll.reduce_scatter_algo(), algo);
    std::vector<torch::Tensor> mine;
    for (int round = 0; round < 2; ++round) {
      for (auto dtype : {torch::kFloat, torch::kDouble}) {
        auto separate = torch::full({part}, NAN, torch::TensorOptions().dtype(dtype));
        coll.reduce_scatter_avg(grads_of(r, world * part, dtype, round), separate);
        mine.push_back(separate);
        auto flat = grads_of(r, world * part, dtype, round);  // level 1: the output is the own part
        auto own = flat.narrow(0, r * part, part);
        coll.reduce_scatter_avg(flat, own);
        mine.push_back(own.clone());
        auto full = torch::zeros({world * part}, torch::TensorOptions().dtype(dtype));  // a gather in between
        coll.allgather(torch::ones({part}, full.options()), full);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    out[r] = mine;
  }, options);
  return out;
}

TEST(ShardReduceScatter, ShmIsBitwiseAllreduceSliceAndCloseToTheRing) {
  const int world = 3;
  for (auto [part, slot] : std::vector<std::pair<int64_t, size_t>>{{10007, 4096}, {5, 4096}, {70000, 1 << 20}}) {
    SCOPED_TRACE("part " + std::to_string(part) + " slot " + std::to_string(slot));
    const auto fast = reduce_scatter_all(world, ReduceScatterAlgo::shm, part, slot);
    const auto reference = reduce_scatter_all(world, ReduceScatterAlgo::allreduce_slice, part, slot);
    const auto ring = reduce_scatter_all(world, ReduceScatterAlgo::ring, part, slot);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(fast[r].size(), reference[r].size());
      for (size_t i = 0; i < fast[r].size(); ++i) {
        EXPECT_TRUE(torch::equal(fast[r][i], reference[r][i])) << "rank " << r << " output " << i;
        EXPECT_TRUE(torch::allclose(fast[r][i], ring[r][i], 1e-5, 1e-6)) << "rank " << r << " output " << i;
        // The plain average of the ranks' parts.
        const int round = static_cast<int>(i / 4);
        const auto dtype = fast[r][i].scalar_type();
        auto sum = torch::zeros({part}, torch::TensorOptions().dtype(dtype));
        for (int k = 0; k < world; ++k) sum += grads_of(k, world * part, dtype, round).narrow(0, r * part, part);
        EXPECT_TRUE(torch::allclose(fast[r][i], sum / world, 1e-5, 1e-6)) << "rank " << r << " output " << i;
      }
    }
  }
}

}  // namespace
