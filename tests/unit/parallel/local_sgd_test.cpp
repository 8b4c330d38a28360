// LocalSGD / DiLoCo (cohort/local_sgd.h): averaging every step is DDP, ranks agree bitwise after
// each synchronisation and only then, the outer Nesterov step is torch::optim::SGD's on the
// averaged delta, a checkpoint taken between synchronisations resumes bitwise, checkpoints of
// other wrappers are refused by name, and the errors.
// Ranks are threads (thread_ranks.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "cohort/local_sgd.h"
#include "cohort/sharded_data_parallel.h"
#include "cohort/torch_compat.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "runtime/torch_compat_internal.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Rank r's half of a global batch.
Batch half(const Batch& b, int r) {
  const auto rows = b.x.size(0) / 2;
  return {b.x.narrow(0, r * rows, rows), b.y.narrow(0, r * rows, rows)};
}

template <typename Model>
void train_step(Model& model, torch::optim::Optimizer& opt, const Batch& b) {
  opt.zero_grad();
  torch::nll_loss(model->forward(b.x), b.y).backward();
  opt.step();
}

LocalSGDOptions nesterov(int64_t every) {
  LocalSGDOptions o;
  o.sync_every = every;
  o.outer = OuterOptimizer::nesterov;
  o.outer_lr = 0.7;
  o.outer_momentum = 0.9;
  return o;
}

}  // namespace

TEST(LocalSGD, AveragingAfterEveryStepIsDataParallelTraining) {
  // SGD with momentum is linear in the gradients: the average of the ranks' steps from the same
  // parameters is the step on the averaged gradient (up to rounding).
  const auto init = initial_parameters(3);
  const auto batches = make_batches(6, 8, 5);
  std::vector<std::vector<torch::Tensor>> got(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    SmallNet net;
    load_parameters(*net, init);
    LocalSGDOptions o;
    o.sync_every = 1;
    auto model = LocalSGD(net, ctx, o);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (const auto& b : batches) {
      train_step(model, opt, half(b, ctx->rank()));
      EXPECT_TRUE(model->step());
    }
    EXPECT_EQ(model->stats().syncs, 6);
    got[ctx->rank()] = snapshot(*model);
  });
  EXPECT_TRUE(bitwise_equal(got[0], got[1]));
  expect_close(got[0], train_single(init, batches));
}

TEST(LocalSGD, RanksAgreeBitwiseAfterEachSynchronisationAndDifferBetween) {
  const int every = 3;
  const auto batches = make_batches(2 * every, 8, 9);
  std::vector<std::vector<std::vector<torch::Tensor>>> seen(2);
  std::vector<LocalSGDStats> stats(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    torch::manual_seed(100 + ctx->rank());  // different initial values: rank 0's are broadcast
    SmallNet net;
    auto model = LocalSGD(net, ctx, nesterov(every));
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
    for (const auto& b : batches) {
      if (seen[ctx->rank()].empty()) seen[ctx->rank()].push_back(snapshot(*model));
      train_step(model, opt, half(b, ctx->rank()));
      model->step();
      seen[ctx->rank()].push_back(snapshot(*model));
    }
    stats[ctx->rank()] = model->stats();
  });
  EXPECT_TRUE(bitwise_equal(seen[0][0], seen[1][0])) << "construction takes rank 0's parameters";
  for (int s = 1; s <= 2 * every; ++s) {
    if (s % every == 0) {
      EXPECT_TRUE(bitwise_equal(seen[0][s], seen[1][s])) << "after synchronising step " << s;
    } else {
      EXPECT_FALSE(bitwise_equal(seen[0][s], seen[1][s])) << "local step " << s << " is each rank's own";
    }
  }
  int64_t numel = 0;
  for (const auto& t : seen[0][0]) numel += t.numel();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(stats[r].local_steps, 2 * every);
    EXPECT_EQ(stats[r].syncs, 2);
    EXPECT_EQ(stats[r].bytes_on_wire, 2 * numel * 4) << "one allreduce of the float parameters per synchronisation";
  }
}

TEST(LocalSGD, TheOuterStepIsTorchSgdWithNesterovOnTheAveragedDelta) {
  const int every = 4, syncs = 2;
  const auto init = initial_parameters(21);
  const auto batches = make_batches(every * syncs, 8, 22);
  std::vector<std::vector<torch::Tensor>> got(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    SmallNet net;
    load_parameters(*net, init);
    auto model = LocalSGD(net, ctx, nesterov(every));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
    for (const auto& b : batches) {
      train_step(model, opt, half(b, ctx->rank()));
      model->step();
    }
    got[ctx->rank()] = snapshot(*model);
  });

  // The same in one thread: two workers, their average, and torch's SGD(nesterov) on the anchor.
  SmallNet anchor;
  load_parameters(*anchor, init);
  torch::optim::SGD outer(anchor->parameters(), torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true));
  for (int k = 0; k < syncs; ++k) {
    std::vector<std::vector<torch::Tensor>> local(2);
    for (int r = 0; r < 2; ++r) {
      SmallNet w;
      load_parameters(*w, snapshot(*anchor));
      torch::optim::SGD opt(w->parameters(), torch::optim::SGDOptions(0.05));
      for (int s = 0; s < every; ++s) train_step(w, opt, half(batches[k * every + s], r));
      local[r] = snapshot(*w);
    }
    auto params = anchor->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto average = (local[0][i] + local[1][i]) / 2;
      params[i].mutable_grad() = params[i].detach() - average;
    }
    outer.step();
  }
  EXPECT_TRUE(bitwise_equal(got[0], got[1]));
  EXPECT_TRUE(bitwise_equal(got[0], snapshot(*anchor))) << "the outer step differs from torch::optim::SGD's";
  expect_close(got[0], snapshot(*anchor), 1e-6, 1e-7);
}

TEST(LocalSGD, ACheckpointBetweenSynchronisationsResumesBitwise) {
  const int every = 3, total = 8, at = 4;  // saved one step after a synchronisation
  const auto batches = make_batches(total, 8, 31);
  const auto init = initial_parameters(32);
  const fs::path dir = fs::temp_directory_path() / ("cohort_local_sgd_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto run = [&](bool resume, std::vector<std::vector<torch::Tensor>>& out) {
    run_ranks(2, [&](std::shared_ptr<Context> ctx) {
      SmallNet net;
      load_parameters(*net, resume ? initial_parameters(99) : init);
      auto model = LocalSGD(net, ctx, nesterov(every));
      torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
      Checkpointer checkpoints(dir.string(), ctx, {.every_steps = at, .async = false});
      int first = 0;
      if (resume) {
        const auto info = checkpoints.restore_latest({&*model, &opt, nullptr});
        ASSERT_TRUE(info.has_value());
        first = static_cast<int>(info->step);
        EXPECT_EQ(model->stats().local_steps, at);
      }
      for (int s = first; s < total; ++s) {
        train_step(model, opt, half(batches[s], ctx->rank()));
        model->step();
        if (!resume && s < at) checkpoints.maybe_save({&*model, &opt, nullptr});
      }
      auto state = snapshot(*model);
      for (const auto& p : model->parameters()) {
        auto& states = opt.state();
        const auto& s = static_cast<const torch::optim::AdamParamState&>(
            *states.at(optimizer_state_key<std::decay_t<decltype(states)>>(p)));
        state.push_back(s.exp_avg().clone());
        state.push_back(s.exp_avg_sq().clone());
      }
      out[ctx->rank()] = state;
    });
  };
  std::vector<std::vector<torch::Tensor>> straight(2), resumed(2);
  run(false, straight);
  run(true, resumed);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(bitwise_equal(straight[r], resumed[r])) << "rank " << r;
  EXPECT_FALSE(bitwise_equal(straight[0], straight[1])) << "the inner Adam state is each rank's own";
  fs::remove_all(dir);
}

TEST(LocalSGD, BadSettingsAreOneConfigErrorNamingTheRank) {
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<Context> ctx) {
    LocalSGDOptions o;
    o.sync_every = 0;
    LocalSGD(SmallNet(), ctx, o);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sync_every is 0"), std::string::npos) << e.what();
    }
  }
  // Ranks that disagree on H fail together at construction, like a model mismatch.
  errors = run_ranks_collect(2, [&](std::shared_ptr<Context> ctx) {
    LocalSGD(SmallNet(), ctx, nesterov(ctx->rank() == 0 ? 20 : 10));
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("local sgd every 10 steps"), std::string::npos) << e.what();
    }
  }
}

TEST(LocalSGD, CheckpointsOfOtherKindsAreRefusedByName) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_local_sgd_kinds_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::vector<std::string> into_sharded(2), into_local(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    {
      auto local = LocalSGD(SmallNet(), ctx, nesterov(5));
      Checkpointer(dir.string() + "/local", ctx).save({&*local, nullptr, nullptr});
      auto ddp = DistributedDataParallel(SmallNet(), ctx);
      Checkpointer(dir.string() + "/ddp", ctx).save({&*ddp, nullptr, nullptr});
    }
    try {
      ShardedOptions o;
      o.level = ShardingLevel::gradients;
      auto sharded = ShardedDataParallel(SmallNet(), ctx, o);
      Checkpointer(dir.string() + "/local", ctx).restore_latest({&*sharded, nullptr, nullptr});
    } catch (const CheckpointError& e) {
      into_sharded[r] = e.what();
    }
    try {
      auto local = LocalSGD(SmallNet(), ctx, nesterov(5));
      Checkpointer(dir.string() + "/ddp", ctx).restore_latest({&*local, nullptr, nullptr});
    } catch (const CheckpointError& e) {
      into_local[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(into_sharded[r].find("saved by a LocalSGD model"), std::string::npos) << "rank " << r << ": " << into_sharded[r];
    EXPECT_NE(into_local[r].find("holds unsharded state"), std::string::npos) << "rank " << r << ": " << into_local[r];
  }
  fs::remove_all(dir);
}
