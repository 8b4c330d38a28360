// The shared-memory allreduce: sums, chunking with uneven segments, bitwise equal results on
// every rank, and a clear error instead of a hang when a rank never arrives.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "cohort/error.h"
#include "runtime/host/shm_allreduce.h"
#include "support/thread_ranks.h"
#include "runtime/context_internals.h"

namespace {

using namespace cohort::testing;

void check_sums(int world, torch::ScalarType dtype, int64_t n, size_t slot_bytes) {
  SCOPED_TRACE("world " + std::to_string(world) + " n " + std::to_string(n) + " slot " + std::to_string(slot_bytes));
  std::mutex mu;
  std::vector<torch::Tensor> results(world);
  RankOptions options{.same_machine = true};
  options.init.shm_slot_bytes = slot_bytes;
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    ASSERT_NE(cohort::detail::ContextInternals::shm_allreduce(*ctx), nullptr);
    auto gen = at::detail::createCPUGenerator(100 + ctx->rank());
    auto t = torch::randn({n}, gen, torch::TensorOptions().dtype(dtype));
    auto expected = t.clone();
    // The plain sum over ranks in rank order, from the same generators.
    expected.zero_();
    for (int k = 0; k < world; ++k) {
      auto g = at::detail::createCPUGenerator(100 + k);
      expected += torch::randn({n}, g, torch::TensorOptions().dtype(dtype));
    }
    for (int round = 0; round < 3; ++round) {  // several operations in a row reuse the buffers
      auto x = t.clone();
      cohort::detail::ContextInternals::shm_allreduce(*ctx)->allreduce_async(x)->wait();
      EXPECT_TRUE(torch::allclose(x, expected, 1e-6, 1e-6));
      if (round == 2) {
        std::lock_guard<std::mutex> lock(mu);
        results[ctx->rank()] = x;
      }
    }
  }, options);
  for (int r = 1; r < world; ++r) EXPECT_TRUE(results[r].equal(results[0])) << "rank " << r << " differs bitwise";
}

TEST(ShmAllreduce, SumsFloatsAndDoubles) {
  check_sums(2, torch::kFloat, 1000, 4 << 20);
  check_sums(4, torch::kDouble, 777, 4 << 20);
}

TEST(ShmAllreduce, ScalesTheSumInTheSamePass) {
  std::vector<torch::Tensor> results(3);
  RankOptions options{.same_machine = true};
  options.init.shm_slot_bytes = 256;
  run_ranks(3, [&](std::shared_ptr<cohort::Context> ctx) {
    auto x = torch::full({1000}, static_cast<float>(ctx->rank() + 1));  // 1 + 2 + 3 = 6
    cohort::detail::ContextInternals::shm_allreduce(*ctx)->allreduce_async(x, 0.5)->wait();
    results[ctx->rank()] = x;
  }, options);
  for (const auto& x : results) EXPECT_TRUE(x.equal(torch::full({1000}, 3.0f)));
}

TEST(ShmAllreduce, ManySmallChunksWithUnevenSegments) {
  check_sums(3, torch::kFloat, 1001, 256);  // 64 floats a chunk, segments of 21/21/22
  check_sums(4, torch::kFloat, 3, 64);      // fewer elements than ranks
}

TEST(ShmAllreduce, OnlyForContiguousCpuFloatingPoint) {
  EXPECT_TRUE(cohort::detail::ShmAllreduce::supports(torch::zeros({4})));
  EXPECT_FALSE(cohort::detail::ShmAllreduce::supports(torch::zeros({4}, torch::kHalf)));
  EXPECT_FALSE(cohort::detail::ShmAllreduce::supports(torch::zeros({4, 4}).t()));
}

TEST(ShmAllreduce, AMissingRankIsAnErrorAfterTheTimeoutNotAHang) {
  RankOptions options{.same_machine = true};
  options.init.collective_timeout = std::chrono::milliseconds(500);
  std::string error;
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    if (ctx->rank() != 0) return;  // rank 1 never takes part
    try {
      cohort::detail::ContextInternals::shm_allreduce(*ctx)->allreduce_async(torch::ones({10}))->wait();
    } catch (const cohort::CommError& e) {
      error = e.what();
    }
  }, options);
  EXPECT_EQ(error, "rank 0: shared-memory allreduce: not every rank arrived within 0.5 s; a peer may have died or hung");
}

}  // namespace

namespace {

TEST(ShmAllreduce, RanksThatDisagreeAboutSharingAMachineAllFallBack) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> got(2, 1);  // not vector<bool>: two threads write it
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      // Rank 1 believes the job spans machines; rank 0 does not. Neither may wait for the other.
      got[r] = cohort::detail::ShmAllreduce::create(r, 2, /*eligible=*/r == 0, store, std::chrono::seconds(10), 4096) != nullptr;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(got[0]);
  EXPECT_FALSE(got[1]);
}

}  // namespace
