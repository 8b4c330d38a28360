// Checkpointer's policies and failures: retention, time-based and skip-when-busy saves decided
// together, failures that training survives, and the errors for checkpoints that do not fit (exact
// resume, corruption and other world sizes are checkpoint_test.cpp's). Ranks are threads (thread_ranks.h); the tests with
// processes, signals and a full disk are in tests/integration/checkpoint_*_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>  // mkfifo

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/format/training_state.h"
#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "checkpoint_fixtures.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

using namespace checkpoint_test;

// --- retention: the newest K plus every M-th; leftovers of interrupted saves go too ---

TEST(CheckpointRetention, KeepsTheNewestAndThePermanentOnes) {
  const std::string dir = fresh_dir("retention");
  fs::create_directories(fs::path(dir) / "step-00000003");  // an interrupted save's leftovers
  const auto batches = make_batches(1, 8);
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.every_steps = 1, .keep_last = 2, .keep_every_steps = 5, .async = true});
    for (int s = 0; s < 12; ++s) {
      t.step(batches[0]);
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
  });
  std::set<int64_t> steps;
  for (const auto& c : ckpt::list_checkpoints(dir)) {
    EXPECT_TRUE(c.manifest.has_value()) << c.path << ": " << c.problem;
    steps.insert(c.step);
  }
  EXPECT_EQ(steps, (std::set<int64_t>{5, 10, 11, 12}));
}

// --- time-based and skip policies: every rank saves at the same steps ---

TEST(CheckpointPolicy, EverySecondsSavesAtTheSameStepOnEveryRank) {
  const std::string dir = fresh_dir("every_seconds");
  const auto batches = make_batches(1, 8);
  std::vector<int64_t> committed(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    // Rank 1's steps take longer than rank 0's: their clocks see different times at each step.
    Checkpointer checkpoints(dir, ctx,
                             {.every_seconds = 0.1, .keep_last = 0, .commit_timeout = std::chrono::seconds(5)});
    for (int s = 0; s < 12; ++s) {
      t.step(batches[0]);
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx->rank() == 0 ? 30 : 45));
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
    committed[ctx->rank()] = checkpoints.saves_committed();
  });
  const auto listed = ckpt::list_checkpoints(dir);
  EXPECT_GE(listed.size(), 2u);  // 12 steps of >= 30 ms with a save due every 100 ms
  EXPECT_EQ(committed[0], static_cast<int64_t>(listed.size()));
  for (const auto& c : listed) EXPECT_EQ(ckpt::verify_checkpoint(c.path), "") << c.path;
}

TEST(CheckpointPolicy, SkipWhenBusyIsDecidedTogether) {
  const std::string dir = fresh_dir("skip");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    // 64 MB of parameters, fsynced at every step, and steps that take no time: most saves find the
    // previous one still being written and are skipped — by both ranks, or the commit would fail.
    struct Big : torch::nn::Module {
      Big() { register_parameter("w", torch::zeros({16 << 20})); }
    } big;
    torch::optim::SGD sgd(big.parameters(), torch::optim::SGDOptions(0.1));
    Checkpointer checkpoints(dir, ctx,
                             {.every_steps = 1,
                              .keep_last = 1,
                              .when_busy = CheckpointOptions::WhenBusy::skip,
                              .commit_timeout = std::chrono::seconds(20)});
    int started = 0;
    for (int s = 0; s < 20; ++s) started += checkpoints.maybe_save({&big, &sgd, nullptr});
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
    EXPECT_LT(started, 20);
    EXPECT_GE(started, 1);
    if (ctx->rank() == 0) EXPECT_EQ(checkpoints.saves_committed(), started);
  });
  for (const auto& c : ckpt::list_checkpoints(dir)) EXPECT_EQ(ckpt::verify_checkpoint(c.path), "") << c.path;
}

// --- failures: a failed save is reported, leaves nothing visible, and training carries on ---

TEST(CheckpointFailure, FailedBackgroundSaveIsReportedAtTheNextCall) {
  const std::string dir = fresh_dir("blocked");
  std::ofstream(dir) << "a file where the checkpoint directory should be";
  const auto batches = make_batches(1, 8);
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.every_steps = 1});
    t.step(batches[0]);
    checkpoints.save_async(t.state());  // the snapshot succeeds; writing fails in the background
    try {
      checkpoints.wait();
      ADD_FAILURE() << "wait() should rethrow the background failure";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("could not create directory " + dir), std::string::npos) << e.what();
    }
    // maybe_save never throws: this save fails in the background too, the next call reports it
    // (a warning in the log, last_error()) and training carries on.
    t.step(batches[0]);
    checkpoints.maybe_save(t.state());
    t.step(batches[0]);
    EXPECT_NO_THROW(checkpoints.maybe_save(t.state()));
    EXPECT_NE(checkpoints.last_error().find("could not create directory"), std::string::npos) << checkpoints.last_error();
  });
  fs::remove(dir);
}

TEST(CheckpointFailure, ARankThatNeverReportsIsATimeoutNotAHang) {
  const std::string dir = fresh_dir("timeout");
  const auto batches = make_batches(1, 8);
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.async = false, .commit_timeout = std::chrono::milliseconds(500)});
    if (ctx->rank() == 0) checkpoints.save(t.state());  // rank 1 never saves
  });
  ASSERT_TRUE(errors[0]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 did not report"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ckpt::list_checkpoints(dir).at(0).manifest.has_value());
}

// --- checkpoints that do not fit are clear errors ---

TEST(CheckpointMismatch, OtherModelOrOptimizerIsAClearError) {
  const std::string dir = fresh_dir("mismatch");
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adam", initial_parameters(1));
    t.step(make_batches(1, 8)[0]);
    Checkpointer(dir, ctx, {.async = false}).save(t.state());
  });
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer wider(ctx, "adam", {}, /*hidden=*/32);
    Checkpointer checkpoints(dir, ctx);
    try {
      checkpoints.restore_latest(wider.state());
      ADD_FAILURE() << "restoring into another model must fail";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor \"module.fc1.weight\" is Float[16, 8] in the checkpoint but Float[32, 8]"),
                std::string::npos)
          << e.what();
    }
    Trainer sgd(ctx, "sgd", initial_parameters(1));
    try {
      checkpoints.restore_latest(sgd.state());
      ADD_FAILURE() << "restoring Adam state into SGD must fail";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds Adam optimizer state but the optimizer is SGD"), std::string::npos)
          << e.what();
    }
    torch::optim::LBFGS lbfgs(sgd.model->parameters(), torch::optim::LBFGSOptions(1));
    EXPECT_THROW(checkpoints.save({&*sgd.model, &lbfgs, nullptr}), CheckpointError);
  });
}

TEST(CheckpointFailure, MissingParentDirectoriesAreCreated) {
  const std::string dir = fresh_dir("nested") + "/runs/job/checkpoints";  // none of it exists yet
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer(dir, ctx, {.async = false}).save(t.state());
  });
  EXPECT_EQ(ckpt::verify_checkpoint(dir + "/step-00000000"), "");
}

TEST(CheckpointMismatch, NoCheckpointIsAFreshStart) {
  const std::string dir = fresh_dir("empty");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx);
    EXPECT_FALSE(checkpoints.restore_latest(t.state()).has_value());
    EXPECT_EQ(checkpoints.step(), 0);
  });
}

}  // namespace
