// Sharded checkpoints: saved on 4 ranks (one shard file each, committed by rank 0), restored on 2
// and on 3 ranks — the restored state, gathered, is bitwise the unsharded state at the save.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "checkpoint/storage/checkpoint_dir.h"
#include "cohort/checkpointer.h"
#include "cohort/error.h"
#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"

namespace {

using namespace cohort::testing;
using cohort::ShardingLevel;

std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("cohort_sharded_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

struct Saved {
  StateMap model, optimizer;
};

// Trains on `world` ranks and saves; returns the unsharded state at the save (rank 0's gather).
Saved train_and_save(const std::string& dir, int world, ShardingLevel level, Opt opt) {
  const int64_t B = 3;
  const auto batches = make_batches(3, B * world, 4);
  const auto init = mlp_init(21);
  Saved saved;
  std::mutex mu;
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::ShardedOptions options;
    options.level = level;
    options.unit_cap_mb = 0.0005;
    auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, options);
    auto optimizer = make_optimizer(opt, model->parameters());
    for (const auto& b : batches) {
      optimizer->zero_grad();
      torch::nll_loss(model->forward(b.x.narrow(0, r * B, B)), b.y.narrow(0, r * B, B)).backward();
      optimizer->step();
    }
    cohort::Checkpointer checkpoints(dir, ctx, {.async = false});
    checkpoints.set_step(3);
    checkpoints.save(cohort::TrainingState{&*model, optimizer.get(), nullptr});
    auto full = model->full_state(optimizer.get());
    std::lock_guard<std::mutex> lock(mu);
    if (r == 0) saved = {to_map(full.model), to_map(full.optimizer)};
  });
  return saved;
}

Saved restore(const std::string& dir, int world, ShardingLevel level, Opt opt) {
  Saved restored;
  std::mutex mu;
  const auto init = mlp_init(99);  // other values: the restore must replace all of them
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    cohort::ShardedOptions options;
    options.level = level;
    auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, options);
    auto optimizer = make_optimizer(opt, model->parameters());
    cohort::Checkpointer checkpoints(dir, ctx, {.async = false});
    auto info = checkpoints.restore_latest(cohort::TrainingState{&*model, optimizer.get(), nullptr});
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->saved_world_size, 4);
    // Training goes on from the restored state: one more step must work.
    optimizer->zero_grad();
    torch::nll_loss(model->forward(torch::randn({2, 8})), torch::tensor({1, 2})).backward();
    auto full = model->full_state(optimizer.get());
    std::lock_guard<std::mutex> lock(mu);
    if (ctx->rank() == 0) restored = {to_map(full.model), to_map(full.optimizer)};
  });
  return restored;
}

class ShardedCheckpoint : public ::testing::TestWithParam<Opt> {};

TEST_P(ShardedCheckpoint, SaveOn4RestoreOn2And3IsBitwiseTheUnshardedState) {
  const Opt opt = GetParam();
  const std::string dir = fresh_dir(opt == Opt::sgd ? "sgd" : "adam");
  const Saved saved = train_and_save(dir, 4, ShardingLevel::parameters, opt);
  ASSERT_FALSE(saved.model.empty());
  ASSERT_FALSE(saved.optimizer.empty());
  EXPECT_TRUE(saved.model.count("module.0.weight"));  // the names an unsharded (DDP) checkpoint uses
  EXPECT_TRUE(saved.optimizer.count(opt == Opt::sgd ? "module.4.bias/momentum_buffer" : "module.4.bias/exp_avg_sq"));

  // The manifest lists one shard file per saved rank.
  const auto listed = cohort::ckpt::list_checkpoints(dir);
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_TRUE(listed[0].manifest.has_value());
  int shards = 0;
  for (const auto& f : listed[0].manifest->files) shards += f.role == "shard";
  EXPECT_EQ(shards, 4);
  EXPECT_FALSE(listed[0].manifest->sharding_json.empty());

  for (int world : {2, 3}) {
    // Restored with another level too: units differ (levels 1, 2 group parameters otherwise).
    for (auto level : {ShardingLevel::parameters, ShardingLevel::optimizer_state}) {
      SCOPED_TRACE("world " + std::to_string(world) + " level " + std::to_string(static_cast<int>(level)));
      const Saved restored = restore(dir, world, level, opt);
      expect_bitwise_equal(restored.model, saved.model);
      expect_bitwise_equal(restored.optimizer, saved.optimizer);
    }
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardedCheckpoint, ::testing::Values(Opt::sgd, Opt::adam),
                         [](const auto& info) { return std::string(info.param == Opt::sgd ? "SGD" : "Adam"); });

TEST(ShardedCheckpointMismatch, UnshardedCheckpointIntoShardedModelIsAClearError) {
  const std::string dir = fresh_dir("mismatch");
  const auto init = mlp_init(3);
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<cohort::Context> ctx) {
    auto ddp = cohort::DistributedDataParallel(make_mlp(init), ctx);
    torch::optim::SGD sgd(ddp->parameters(), torch::optim::SGDOptions(0.1));
    cohort::Checkpointer c1(dir, ctx, {.async = false});
    c1.save(cohort::TrainingState{&*ddp, &sgd, nullptr});
    auto model = cohort::ShardedDataParallel(make_mlp(init), ctx);
    torch::optim::SGD sgd2(model->parameters(), torch::optim::SGDOptions(0.1));
    cohort::Checkpointer c2(dir, ctx, {.async = false});
    c2.restore_latest(cohort::TrainingState{&*model, &sgd2, nullptr});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const cohort::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds unsharded state"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

// Survivors keep running (cohort/keep_running.h): at a rejoin every ShardedDataParallel repeats its
// constructor's collectives on the new groups, and since a lost rank's shard exists only in its
// snapshots, it trains on only once restored. Here every rank rejoins (threads: no rank is lost):
// the forward before the restore is a clear error, and three steps with a rejoin after the third
// (and a fourth interrupted after its backward) and the third taken again from the checkpoint of
// step 2 end bitwise where three steps end.
TEST(ShardedRejoin, SurvivorsTrainOnOnlyFromTheRestoredStateAndEndBitwiseTheSame) {
  const std::string dir = fresh_dir("rejoin");
  const int64_t B = 3;
  const auto batches = make_batches(3, B * 2, 4);
  const auto init = mlp_init(5);
  for (auto level : {ShardingLevel::gradients, ShardingLevel::parameters}) {
    SCOPED_TRACE("level " + std::to_string(static_cast<int>(level)));
    std::filesystem::remove_all(dir);
    std::mutex mu;
    std::map<bool, Saved> ends;  // by whether the run rejoined
    for (bool rejoin : {false, true}) {
      run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
        const int r = ctx->rank();
        cohort::ShardedOptions options;
        options.level = level;
        auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, options);
        auto optimizer = make_optimizer(Opt::adam, model->parameters());
        cohort::Checkpointer checkpoints(dir + (rejoin ? "/rejoined" : "/straight"), ctx, {.async = false});
        const auto step = [&](const Batch& b) {
          optimizer->zero_grad();
          torch::nll_loss(model->forward(b.x.narrow(0, r * B, B)), b.y.narrow(0, r * B, B)).backward();
          optimizer->step();
        };
        const cohort::TrainingState state{&*model, optimizer.get(), nullptr};
        step(batches[0]);
        step(batches[1]);
        checkpoints.set_step(2);
        checkpoints.save(state);
        step(batches[2]);
        if (rejoin) {
          {  // a step interrupted after its backward: gradients left on the parameters (no_sync keeps them)
            auto local = model->no_sync();
            torch::nll_loss(model->forward(batches[0].x.narrow(0, r * B, B)), batches[0].y.narrow(0, r * B, B)).backward();
          }
          ctx->rejoin(1);
          try {
            model->forward(batches[0].x.narrow(0, r * B, B));
            ADD_FAILURE() << "rank " << r << ": a forward before the restore after a rejoin";
          } catch (const cohort::ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("restore them"), std::string::npos) << e.what();
          }
          auto info = checkpoints.restore_latest(state);
          ASSERT_TRUE(info.has_value());
          EXPECT_EQ(info->step, 2);
          step(batches[2]);
        }
        auto full = model->full_state(optimizer.get());
        std::lock_guard<std::mutex> lock(mu);
        if (r == 0) ends[rejoin] = {to_map(full.model), to_map(full.optimizer)};
      });
    }
    expect_bitwise_equal(ends[true].model, ends[false].model);
    expect_bitwise_equal(ends[true].optimizer, ends[false].optimizer);
  }
  std::filesystem::remove_all(dir);
}

// A replacement (a process that joins a running job, generation > 0) holds rank 0's broadcast, not
// its shard: its forward before a restore is the same clear error, and after one it trains.
TEST(ShardedRejoin, AReplacementTrainsOnlyAfterARestore) {
  const std::string dir = fresh_dir("replacement");
  train_and_save(dir, 2, ShardingLevel::parameters, Opt::adam);
  RankOptions joining;
  joining.generation = 1;
  const auto init = mlp_init(7);
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    auto model = cohort::ShardedDataParallel(make_mlp(init), ctx);
    auto optimizer = make_optimizer(Opt::adam, model->parameters());
    EXPECT_THROW(model->forward(torch::ones({2, 8})), cohort::ConfigError);
    cohort::Checkpointer checkpoints(dir, ctx, {.async = false});
    ASSERT_TRUE(checkpoints.restore_latest(cohort::TrainingState{&*model, optimizer.get(), nullptr}).has_value());
    optimizer->zero_grad();
    EXPECT_NO_THROW(torch::nll_loss(model->forward(torch::ones({2, 8})), torch::tensor({1, 2})).backward());
  }, joining);
  std::filesystem::remove_all(dir);
}

}  // namespace
