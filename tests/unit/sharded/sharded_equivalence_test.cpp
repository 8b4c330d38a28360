// Each sharding level against DDP: W ranks, K steps, SGD with momentum, Adam and AdamW, the same
// parameters within 1e-5 (relative) — with world sizes that do not divide the units' sizes.
#include <gtest/gtest.h>

#include <mutex>

#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"

namespace {

using namespace cohort::testing;
using cohort::ShardingLevel;

struct EquivalenceCase {
  int world;
  ShardingLevel level;
  Opt opt;
  bool same_machine = false;  // shared-memory collectives instead of Gloo's
  cohort::ReduceScatterAlgo rs = cohort::ReduceScatterAlgo::automatic;
};

std::string name_of(const ::testing::TestParamInfo<EquivalenceCase>& info) {
  const EquivalenceCase& c = info.param;
  const char* opt = c.opt == Opt::sgd          ? "SGD"
                    : c.opt == Opt::adam       ? "Adam"
                    : c.opt == Opt::fused_adam ? "FusedAdam"
                    : c.opt == Opt::fused_adamw ? "FusedAdamW"
                                                : "AdamW";
  std::string rs = c.rs == cohort::ReduceScatterAlgo::ring              ? "_ring"
                   : c.rs == cohort::ReduceScatterAlgo::allreduce_slice ? "_allreduce_slice"
                   : c.rs == cohort::ReduceScatterAlgo::shm             ? "_shm"
                                                                        : "";
  return "W" + std::to_string(c.world) + "_level" + std::to_string(static_cast<int>(c.level)) + "_" + opt +
         (c.same_machine ? "_shm" : "") + rs;
}

// Trains `steps` steps on `world` ranks with DDP and with sharding; returns both final states.
struct Result {
  StateMap ddp, sharded;
  cohort::ShardedStats stats;
  std::vector<StateMap> ddp_by_rank, sharded_by_rank;  // every rank's view, for bitwise agreement
};

Result train_both(const EquivalenceCase& c, int steps, double clip = 0, int accumulate = 1) {
  const int64_t B = 5;
  const auto batches = make_batches(steps * accumulate, B * c.world, 3);
  const auto init = mlp_init(11), other = mlp_init(12);
  Result result;
  result.ddp_by_rank.resize(c.world);
  result.sharded_by_rank.resize(c.world);
  std::mutex mu;
  run_ranks(c.world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    auto slice = [&](const Batch& b) { return std::make_pair(b.x.narrow(0, r * B, B), b.y.narrow(0, r * B, B)); };
    // DDP, the yardstick.
    auto ddp = cohort::DistributedDataParallel(make_mlp(init), ctx);
    auto opt1 = make_optimizer(c.opt, ddp->parameters());
    for (int s = 0; s < steps; ++s) {
      opt1->zero_grad();
      for (int a = 0; a < accumulate; ++a) {
        auto [x, y] = slice(batches[s * accumulate + a]);
        if (a + 1 < accumulate) {
          auto guard = ddp->no_sync();
          torch::nll_loss(ddp->forward(x), y).backward();
        } else {
          torch::nll_loss(ddp->forward(x), y).backward();
        }
      }
      if (clip > 0) torch::nn::utils::clip_grad_norm_(ddp->parameters(), clip);
      opt1->step();
    }
    // Sharded.
    cohort::ShardedOptions options;
    options.level = c.level;
    options.reduce_scatter = c.rs;
    options.unit_cap_mb = 0.0005;  // levels 1, 2: a few units, like level 3's per-layer ones
    auto model = cohort::ShardedDataParallel(make_mlp(r == 0 ? init : other), ctx, options);  // rank 0's values win
    auto opt2 = make_optimizer(c.opt, model->parameters());
    for (int s = 0; s < steps; ++s) {
      opt2->zero_grad();
      for (int a = 0; a < accumulate; ++a) {
        auto [x, y] = slice(batches[s * accumulate + a]);
        if (a + 1 < accumulate) {
          auto guard = model->no_sync();
          torch::nll_loss(model->forward(x), y).backward();
        } else {
          torch::nll_loss(model->forward(x), y).backward();
        }
      }
      if (clip > 0) model->clip_grad_norm(clip);
      opt2->step();
    }
    auto full = to_map(model->full_state(nullptr).model);
    std::lock_guard<std::mutex> lock(mu);
    result.ddp_by_rank[r] = named_parameters(ddp);
    result.sharded_by_rank[r] = full;
    if (r == 0) {
      result.ddp = named_parameters(ddp);
      result.sharded = full;
      result.stats = model->stats();
    }
  }, {.same_machine = c.same_machine});
  return result;
}

class ShardedEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(ShardedEquivalence, SameParametersAsDdp) {
  const EquivalenceCase c = GetParam();
  const auto r = train_both(c, 4);
  expect_same_state(r.sharded, r.ddp);
  if (c.opt == Opt::fused_adam || c.opt == Opt::fused_adamw) {  // every rank holds bitwise the same model
    for (int k = 1; k < c.world; ++k) {
      expect_bitwise_equal(r.ddp_by_rank[k], r.ddp_by_rank[0]);
      expect_bitwise_equal(r.sharded_by_rank[k], r.sharded_by_rank[0]);
    }
  }
  EXPECT_EQ(r.stats.sync_iterations, 4);
  EXPECT_EQ(r.stats.num_units, c.level == ShardingLevel::parameters ? 3 : r.stats.num_units);
  EXPECT_GT(r.stats.reductions_in_backward, 0);  // launched from hooks, overlapping backward
}

std::vector<EquivalenceCase> cases() {
  std::vector<EquivalenceCase> out;
  for (int w : {2, 3, 4})
    for (auto level : {ShardingLevel::optimizer_state, ShardingLevel::gradients, ShardingLevel::parameters})
      for (auto opt : {Opt::sgd, Opt::adam}) out.push_back({w, level, opt});
  out.push_back({3, ShardingLevel::parameters, Opt::adamw});
  // On one machine: shared-memory allgather, and each reduce-scatter algorithm.
  out.push_back({3, ShardingLevel::parameters, Opt::adam, true});
  out.push_back({4, ShardingLevel::gradients, Opt::sgd, true, cohort::ReduceScatterAlgo::ring});
  out.push_back({3, ShardingLevel::parameters, Opt::adam, false, cohort::ReduceScatterAlgo::allreduce_slice});
  out.push_back({3, ShardingLevel::optimizer_state, Opt::adam, true, cohort::ReduceScatterAlgo::allreduce_slice});
  out.push_back({3, ShardingLevel::optimizer_state, Opt::adam, true, cohort::ReduceScatterAlgo::ring});
  out.push_back({3, ShardingLevel::optimizer_state, Opt::fused_adam, true, cohort::ReduceScatterAlgo::shm});
  out.push_back({3, ShardingLevel::parameters, Opt::adam, true, cohort::ReduceScatterAlgo::shm});
  // cohort::FusedAdam / FusedAdamW (weight decay on) under each level, against DDP with the same.
  for (auto level : {ShardingLevel::optimizer_state, ShardingLevel::gradients, ShardingLevel::parameters}) {
    out.push_back({3, level, Opt::fused_adam});
    out.push_back({3, level, Opt::fused_adam, true});
  }
  out.push_back({2, ShardingLevel::optimizer_state, Opt::fused_adamw, true});
  out.push_back({4, ShardingLevel::parameters, Opt::fused_adamw});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Levels, ShardedEquivalence, ::testing::ValuesIn(cases()), name_of);

TEST(ShardedEquivalenceExtra, GradientClippingByGlobalNorm) {
  for (auto level : {ShardingLevel::optimizer_state, ShardingLevel::parameters}) {
    const auto r = train_both({3, level, Opt::sgd}, 4, /*clip=*/0.05);
    expect_same_state(r.sharded, r.ddp);
  }
}

TEST(ShardedEquivalenceExtra, NoSyncAccumulation) {
  for (auto level : {ShardingLevel::optimizer_state, ShardingLevel::gradients, ShardingLevel::parameters}) {
    const auto r = train_both({2, level, Opt::adam}, 3, 0, /*accumulate=*/3);
    expect_same_state(r.sharded, r.ddp);
    EXPECT_EQ(r.stats.sync_iterations, 3);
  }
}

// A module that is not a Sequential: level 3 treats it as one unit.
TEST(ShardedEquivalenceExtra, Level3OnAnyModuleIsOneUnit) {
  const int world = 3;
  const int64_t B = 4;
  const auto init = initial_parameters(5);
  const auto batches = make_batches(4, B * world, 8);
  std::vector<torch::Tensor> ddp_params, sharded_params;
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    SmallNet a, b;
    load_parameters(*a, init);
    load_parameters(*b, init);
    auto ddp = cohort::DistributedDataParallel(a, ctx);
    auto model = cohort::ShardedDataParallel(b, ctx);
    torch::optim::Adam o1(ddp->parameters(), torch::optim::AdamOptions(0.01));
    torch::optim::Adam o2(model->parameters(), torch::optim::AdamOptions(0.01));
    EXPECT_EQ(model->stats().num_units, 1);
    for (const auto& batch : batches) {
      auto x = batch.x.narrow(0, r * B, B), y = batch.y.narrow(0, r * B, B);
      o1.zero_grad();
      torch::nll_loss(ddp->forward(x), y).backward();
      o1.step();
      o2.zero_grad();
      torch::nll_loss(model->forward(x), y).backward();
      o2.step();
    }
    if (r == 0) {
      ddp_params = snapshot(*ddp->module());
      for (auto& [name, t] : model->full_state(nullptr).model) sharded_params.push_back(t);
    } else {
      model->full_state(nullptr);
    }
  });
  expect_close(sharded_params, ddp_params);
}

}  // namespace
