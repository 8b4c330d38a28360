// Sharded data parallel: bad options are ConfigErrors at construction on every rank; level 3
// gathers units one (or, with prefetch, two or three) at a time and frees them.
#include <gtest/gtest.h>

#include "cohort/error.h"
#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"

namespace {

using namespace cohort::testing;
using cohort::ShardingLevel;

// Every rank throws a ConfigError whose message contains `expected`.
void expect_config_error_on_every_rank(const cohort::ShardedOptions& options, const std::string& expected,
                                       bool sequential = true) {
  const auto init = mlp_init(1);
  const int world = 3;
  auto errors = run_ranks_collect(world, [&](std::shared_ptr<cohort::Context> ctx) {
    if (sequential) {
      auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, options);
    } else {
      auto model = cohort::ShardedDataParallel(SmallNet(), ctx, options);
    }
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not throw";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const cohort::ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(r) + ": ShardedDataParallel: "), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw something else: " << e.what();
    }
  }
}

TEST(ShardedOptions, UnknownUnitIsAConfigErrorOnEveryRank) {
  cohort::ShardedOptions o;
  o.units = {{"0"}, {"2"}, {"fc9"}};
  expect_config_error_on_every_rank(o, "unit 2 names 'fc9', which is not a submodule of the model (0, 1, 2, 3, 4, 5)");
}

TEST(ShardedOptions, ParameterInNoUnit) {
  cohort::ShardedOptions o;
  o.units = {{"0"}, {"2"}};
  expect_config_error_on_every_rank(o, "parameter '4.weight' is in no unit");
}

TEST(ShardedOptions, UnitWithoutParameters) {
  cohort::ShardedOptions o;
  o.units = {{"0"}, {"1"}, {"2", "3", "4"}};
  expect_config_error_on_every_rank(o, "unit 1 (1) has no trainable parameters");
}

TEST(ShardedOptions, Level3UnitsNeedConsecutiveChildren) {
  cohort::ShardedOptions o;
  o.units = {{"0", "4"}, {"2"}};
  expect_config_error_on_every_rank(o, "must name consecutive children");
}

TEST(ShardedOptions, Level3UnitsNeedASequential) {
  cohort::ShardedOptions o;
  o.units = {{"fc1"}, {"fc2", "fc3"}};
  expect_config_error_on_every_rank(o, "need the module to be a torch::nn::Sequential", /*sequential=*/false);
}

TEST(ShardedOptions, NativeReduceScatterOnGloo) {
  cohort::ShardedOptions o;
  o.reduce_scatter = cohort::ReduceScatterAlgo::native;
  expect_config_error_on_every_rank(o, "reduce_scatter = native, but this libtorch's gloo process group has no reduce_scatter");
}

TEST(ShardedOptions, ShmAllgatherWithoutSharedMemory) {
  cohort::ShardedOptions o;
  o.allgather = cohort::AllgatherAlgo::shm_allreduce;
  expect_config_error_on_every_rank(o, "allgather = shm_allreduce needs the shared-memory engine");
  o.allgather = cohort::AllgatherAlgo::shm;
  expect_config_error_on_every_rank(o, "allgather = shm needs the shared-memory engine");
  cohort::ShardedOptions p;
  p.reduce_scatter = cohort::ReduceScatterAlgo::shm;
  expect_config_error_on_every_rank(p, "reduce_scatter = shm needs the shared-memory engine");
}

TEST(ShardedOptions, BadLevelAndCap) {
  cohort::ShardedOptions o;
  o.level = static_cast<ShardingLevel>(4);
  expect_config_error_on_every_rank(o, "level must be");
  cohort::ShardedOptions p;
  p.unit_cap_mb = 0;
  expect_config_error_on_every_rank(p, "unit_cap_mb must be positive");
}

TEST(ShardedOptions, NamedUnitsAtLevel2AnyModule) {
  const auto init = initial_parameters(2);
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    cohort::ShardedOptions o;
    o.level = ShardingLevel::gradients;
    o.units = {{"fc3"}, {"fc1", "fc2"}};
    SmallNet net;
    load_parameters(*net, init);
    auto model = cohort::ShardedDataParallel(net, ctx, o);
    const auto layout = model->unit_layout();
    ASSERT_EQ(layout.size(), 2u);  // ordered by first parameter
    EXPECT_EQ(layout[0], (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
    EXPECT_EQ(layout[1], (std::vector<std::string>{"fc3.weight", "fc3.bias"}));
  });
}

// Level 3: after backward every unit is freed; during forward and backward at most the current
// unit and the prefetched one(s) are held.
TEST(ShardedLevel3, UnitsAreFreedAndAtMostAFewHeld) {
  const auto init = mlp_init(4);
  const auto batches = make_batches(2, 8, 5);
  for (bool prefetch : {false, true}) {
    run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
      cohort::ShardedOptions o;
      o.prefetch = prefetch;
      auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, o);
      torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
      const int r = ctx->rank();
      for (const auto& b : batches) {
        sgd.zero_grad();
        torch::nll_loss(model->forward(b.x.narrow(0, r * 4, 4)), b.y.narrow(0, r * 4, 4)).backward();
        sgd.step();
        for (const auto& p : model->module()->parameters())
          EXPECT_EQ(p.storage().nbytes(), 0u) << "a unit stayed gathered after backward";
        for (const auto& p : model->module()->parameters()) EXPECT_FALSE(p.grad().defined());
      }
      const auto s = model->stats();
      EXPECT_EQ(s.num_units, 3);
      EXPECT_LE(s.max_units_gathered, prefetch ? 3 : 1);
      EXPECT_GE(s.max_units_gathered, 1);
      EXPECT_EQ(s.unit_gathers, 2 * 6 - 2);  // forward 3 + backward 3, less the last unit kept for backward
      // Evaluation without autograd frees every unit too.
      torch::NoGradGuard no_grad;
      model->eval();
      model->forward(torch::randn({2, 8}));
      for (const auto& p : model->module()->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u);
    });
  }
}

}  // namespace
