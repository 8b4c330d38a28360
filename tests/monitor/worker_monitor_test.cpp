// Worker-side monitoring (issue 6): cohort::monitor() with DDP and ShardedDataParallel, ranks as
// threads (each bound to its own Monitor with ScopedMonitor): phases, samples, the gradient norm,
// the NaN policies, communication bytes. The "metrics" datagram to the agent is
// worker_monitor_datagram_test.cpp's. Behaviour only: no timing assertions.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "cohort/monitor.h"
#include "cohort/sharded_data_parallel.h"
#include "monitor/worker_monitor.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/flight_recorder.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "worker_monitor_fixtures.h"

namespace {

using namespace worker_monitor_test;

TEST(WorkerMonitor, PhasesAddUpToTheStepTimeAndSamplesAreCounted) {
  const int world = 2;
  const auto batches = make_batches(4, 8);
  std::vector<std::vector<cohort::StepRecord>> records(world);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts());
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (size_t s = 0; s < batches.size(); ++s) {
      auto loss = train_step(model, sgd, batches[s], r, world);
      if (s == 2) {  // an evaluation forward inside the loop: neither a phase mark nor samples
        torch::NoGradGuard no_grad;
        model->forward(batches[s].x);
      }
      cohort::monitor().step({{"loss", loss.item<double>()}, {"lr", 0.1}});
      records[r].push_back(*cohort::monitor().last());
    }
    // Two micro-batches in one step (no_sync): their samples add up.
    sgd.zero_grad();
    {
      auto no_sync = model->no_sync();
      torch::nll_loss(model->forward(batches[0].x.narrow(0, 0, 3)), batches[0].y.narrow(0, 0, 3)).backward();
    }
    torch::nll_loss(model->forward(batches[0].x.narrow(0, 3, 2)), batches[0].y.narrow(0, 3, 2)).backward();
    sgd.step();
    cohort::monitor().step(std::map<std::string, double>{{"loss", 1.0}});
    records[r].push_back(*cohort::monitor().last());
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(records[r].size(), 5u);
    for (size_t s = 0; s < records[r].size(); ++s) {
      const auto& rec = records[r][s];
      EXPECT_EQ(rec.step, static_cast<int64_t>(s + 1));
      EXPECT_GT(rec.step_s, 0);
      double sum = 0;
      for (int p = 0; p < cohort::kPhaseCount; ++p) {
        const auto phase = static_cast<cohort::Phase>(p);
        // The first step starts at the first forward: it has no data phase.
        if (s == 0 && phase == cohort::Phase::data) {
          EXPECT_FALSE(rec.phase(phase).has_value());
          continue;
        }
        ASSERT_TRUE(rec.phase(phase).has_value()) << "step " << rec.step << " lacks " << cohort::to_string(phase);
        EXPECT_GE(*rec.phase(phase), 0);
        sum += *rec.phase(phase);
      }
      EXPECT_NEAR(sum, rec.step_s, 1e-9) << "step " << rec.step;
      ASSERT_TRUE(rec.samples.has_value());
      EXPECT_EQ(*rec.samples, s < 4 ? 4 : 5) << "step " << rec.step;
      ASSERT_TRUE(rec.samples_per_s.has_value());
      EXPECT_DOUBLE_EQ(*rec.samples_per_s, static_cast<double>(*rec.samples) / rec.step_s);
      EXPECT_GT(rec.rss_bytes, 0);
      EXPECT_FALSE(rec.cuda_bytes.has_value());
    }
    EXPECT_EQ(records[r][1].scalar("lr").value_or(-1), 0.1);
  }
}

TEST(WorkerMonitor, GradNormIsTheNormOfTheAveragedGradientsOnEveryRank) {
  const int world = 2;
  const auto batches = make_batches(2, 8, 7);
  std::vector<double> reported(world), by_hand(world);
  for (bool reference : {false, true}) {
    run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
      const int r = ctx->rank();
      cohort::Monitor mon(opts());
      cohort::ScopedMonitor bind(mon);
      SmallNet net;
      cohort::DDPOptions o;
      o.bucket_cap_mb = 1e-4;  // several buckets
      o.reference_mode = reference;
      auto model = cohort::DistributedDataParallel(net, ctx, o);
      torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
      for (const auto& b : batches) {
        sgd.zero_grad();
        torch::nll_loss(model->forward(b.x.narrow(0, r * 4, 4)), b.y.narrow(0, r * 4, 4)).backward();
        double squares = 0;
        for (const auto& p : model->parameters()) squares += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
        by_hand[r] = std::sqrt(squares);
        sgd.step();
        cohort::monitor().step();
        reported[r] = cohort::monitor().last()->grad_norm.value_or(-1);
      }
    });
    EXPECT_EQ(reported[0], reported[1]) << "the ranks' norms differ (reference mode " << reference << ")";
    EXPECT_NEAR(reported[0], by_hand[0], 1e-5 * by_hand[0]) << "reference mode " << reference;
  }
}

TEST(WorkerMonitor, NanGradientWithStopThrowsOnEveryRankNamingIt) {
  const int world = 2;
  const auto batches = make_batches(3, 8);
  std::vector<int64_t> steps_done(world, 0);
  auto errors = run_ranks_collect(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts(cohort::OnNan::stop));
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (size_t s = 0; s < batches.size(); ++s) {
      train_step(model, sgd, batches[s], r, world, /*nan=*/r == 1 && s == 1);
      cohort::monitor().step();
      steps_done[r]++;
    }
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not stop";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const cohort::AnomalyError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(r) + ": non-finite gradient norm (nan) at step 2"), std::string::npos)
          << what;
      EXPECT_NE(what.find("on_nan=stop"), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " threw something else: " << e.what();
    }
    EXPECT_EQ(steps_done[r], 1);
  }
}

TEST(WorkerMonitor, NanLossGivenToStepWithStopThrows) {
  cohort::Monitor mon(opts(cohort::OnNan::stop));
  cohort::ScopedMonitor bind(mon);
  cohort::monitor().step({{"loss", 1.0}});
  EXPECT_THROW(cohort::monitor().step({{"loss", kNaN}}), cohort::AnomalyError);
  cohort::Monitor warn(opts(cohort::OnNan::warn));
  cohort::ScopedMonitor bind_warn(warn);
  EXPECT_NO_THROW(cohort::monitor().step({{"loss", std::numeric_limits<double>::infinity()}}));
  EXPECT_TRUE(std::isinf(*cohort::monitor().last()->scalar("loss")));
}

// Trains `steps` steps on 2 ranks; at step `bad` (1-based) either the loss is NaN on rank 1 with
// on_nan=skip (poison), or the step runs without any gradient (no backward, gradients undefined).
struct SkipRun {
  std::vector<std::vector<torch::Tensor>> final_params, before_bad, after_bad;
  std::vector<int64_t> skipped;
  std::vector<char> record_skipped;  // not vector<bool>: its bits share words, and the ranks write at once
};
SkipRun run_with_bad_step(int steps, int bad, bool poison) {
  const int world = 2;
  const auto init = initial_parameters(11);
  const auto batches = make_batches(steps, 8, 13);
  SkipRun out;
  out.final_params.resize(world);
  out.before_bad.resize(world);
  out.after_bad.resize(world);
  out.skipped.resize(world);
  out.record_skipped.resize(world);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts(cohort::OnNan::skip));
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    load_parameters(*net, init);
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 1; s <= steps; ++s) {
      const auto& b = batches[s - 1];
      if (s == bad) out.before_bad[r] = snapshot(*net);
      if (s == bad && !poison) {
        sgd.zero_grad();
        for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
        sgd.step();
      } else {
        train_step(model, sgd, b, r, world, /*nan=*/poison && s == bad && r == 1);
      }
      cohort::monitor().step();
      if (s == bad) {
        out.after_bad[r] = snapshot(*net);
        out.record_skipped[r] = cohort::monitor().last()->skipped;
      }
    }
    out.final_params[r] = snapshot(*net);
    out.skipped[r] = cohort::monitor().skipped_steps();
  });
  return out;
}

TEST(WorkerMonitor, NanGradientWithSkipLeavesParametersBitwiseAndTrainingContinues) {
  const int steps = 6, bad = 3;
  const SkipRun poisoned = run_with_bad_step(steps, bad, /*poison=*/true);
  const SkipRun without = run_with_bad_step(steps, bad, /*poison=*/false);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(bitwise_equal(poisoned.before_bad[r], poisoned.after_bad[r]))
        << "rank " << r << ": the skipped step changed the parameters";
    EXPECT_EQ(poisoned.skipped[r], 1) << "rank " << r;
    EXPECT_TRUE(poisoned.record_skipped[r]) << "rank " << r;
    EXPECT_EQ(without.skipped[r], 0);
    for (const auto& t : poisoned.final_params[r]) EXPECT_TRUE(torch::isfinite(t).all().item<bool>());
    EXPECT_TRUE(bitwise_equal(poisoned.final_params[r], without.final_params[r]))
        << "rank " << r << ": training after the skipped step differs from a run whose step had no gradients";
  }
  EXPECT_TRUE(bitwise_equal(poisoned.final_params[0], poisoned.final_params[1]));
}

// The comm figures of every rank's every step, summed, equal what DDP allreduced (ranks as
// threads take completions from one process-wide recorder, so only the sum is per-rank exact).
void expect_comm_bytes_match(bool same_machine) {
  const int world = 2;
  const auto batches = make_batches(3, 8);
  std::vector<int64_t> comm(world, 0), ddp(world, 0);
  std::vector<int> busbw_steps(world, 0);
  ThreadBarrier ready(world);
  RankOptions ro;
  ro.same_machine = same_machine;
  run_ranks(
      world,
      [&](std::shared_ptr<cohort::Context> ctx) {
        const int r = ctx->rank();
        cohort::Monitor mon(opts());
        cohort::ScopedMonitor bind(mon);
        SmallNet net;
        cohort::DDPOptions o;
        o.bucket_cap_mb = 1e-4;
        auto model = cohort::DistributedDataParallel(net, ctx, o);
        torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
        ctx->barrier();
        cohort::detail::flight_recorder().take_comm_totals();  // construction's broadcasts are not counted
        ready.arrive_and_wait();
        const int64_t before = model->stats().bytes_allreduced;
        for (const auto& b : batches) {
          train_step(model, sgd, b, r, world);
          cohort::monitor().step();
          const auto rec = *cohort::monitor().last();
          comm[r] += rec.comm_bytes;
          if (rec.busbw) busbw_steps[r]++;
        }
        ddp[r] = model->stats().bytes_allreduced - before;
      },
      ro);
  EXPECT_GT(ddp[0], 0);
  EXPECT_EQ(comm[0] + comm[1], ddp[0] + ddp[1]);
  EXPECT_GT(busbw_steps[0] + busbw_steps[1], 0);
}

TEST(WorkerMonitor, CommBytesEqualDdpBytesAllreducedOverGloo) { expect_comm_bytes_match(false); }
TEST(WorkerMonitor, CommBytesEqualDdpBytesAllreducedOverSharedMemory) { expect_comm_bytes_match(true); }

TEST(WorkerMonitor, ShardedDataParallelMarksPhasesAndCountsBytes) {
  const int world = 2;
  const auto batches = make_batches(3, 8);
  std::vector<cohort::StepRecord> last(world);
  std::vector<int64_t> comm(world, 0);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts());
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    cohort::ShardedOptions o;
    o.level = cohort::ShardingLevel::gradients;
    auto model = cohort::ShardedDataParallel(net, ctx, o);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (const auto& b : batches) {
      sgd.zero_grad();
      torch::nll_loss(model->forward(b.x.narrow(0, r * 4, 4)), b.y.narrow(0, r * 4, 4)).backward();
      model->clip_grad_norm(100.0);
      sgd.step();
      cohort::monitor().step();
      comm[r] += cohort::monitor().last()->comm_bytes;
    }
    last[r] = *cohort::monitor().last();
  });
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < cohort::kPhaseCount; ++p)
      EXPECT_TRUE(last[r].phase(static_cast<cohort::Phase>(p)).has_value()) << cohort::to_string(static_cast<cohort::Phase>(p));
    EXPECT_EQ(last[r].samples.value_or(0), 4);
    ASSERT_TRUE(last[r].grad_norm.has_value()) << "clip_grad_norm's norm is the monitor's";
  }
  EXPECT_EQ(*last[0].grad_norm, *last[1].grad_norm);
  EXPECT_GT(comm[0] + comm[1], 0);
}

TEST(WorkerMonitor, ShardedClipGradNormAppliesTheSkipPolicy) {
  const int world = 2;
  const auto batches = make_batches(3, 8);
  std::vector<char> unchanged(world, false);  // not vector<bool>: its bits share words, and the ranks write at once
  std::vector<int64_t> skipped(world, 0);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    cohort::Monitor mon(opts(cohort::OnNan::skip));
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    cohort::ShardedOptions o;
    o.level = cohort::ShardingLevel::gradients;
    auto model = cohort::ShardedDataParallel(net, ctx, o);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (size_t s = 0; s < batches.size(); ++s) {
      std::vector<torch::Tensor> before;
      for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
      sgd.zero_grad();
      auto loss = torch::nll_loss(model->forward(batches[s].x.narrow(0, r * 4, 4)), batches[s].y.narrow(0, r * 4, 4));
      if (s == 1 && r == 1) loss = loss * kNaN;
      loss.backward();
      model->clip_grad_norm(1e9);
      sgd.step();
      cohort::monitor().step();
      std::vector<torch::Tensor> after;
      for (const auto& p : model->parameters()) after.push_back(p.detach().clone());
      if (s == 1) unchanged[r] = bitwise_equal(before, after);
    }
    for (const auto& p : model->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
    skipped[r] = cohort::monitor().skipped_steps();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(unchanged[r]) << "rank " << r;
    EXPECT_EQ(skipped[r], 1) << "rank " << r;
  }
}

TEST(WorkerMonitor, NonFiniteNumbersAreSentAsStrings) {
  cohort::StepRecord r;
  r.step = 3;
  r.step_s = 0.5;
  r.grad_norm = kNaN;
  r.scalars = {{"loss", std::numeric_limits<double>::infinity()}, {"we\"ird", -std::numeric_limits<double>::infinity()}};
  const auto j = nlohmann::json::parse(cohort::detail::metrics_message(r, {1, 2, 0, 42}));
  EXPECT_EQ(j["type"], "metrics");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["grad_norm"], "nan");
  EXPECT_EQ(j["scalars"]["loss"], "inf");
  EXPECT_EQ(j["scalars"]["we\"ird"], "-inf");
  EXPECT_FALSE(j.contains("phases"));  // not measured: absent
  EXPECT_FALSE(j.contains("busbw"));
  EXPECT_EQ(j["step_s"], 0.5);
}

TEST(WorkerMonitor, RestoreContinuesTheStepNumbers) {
  char templ[] = "/tmp/cohort-monitor-ckpt-XXXXXX";
  const std::string dir = mkdtemp(templ);
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    {
      cohort::Monitor mon(opts());
      cohort::ScopedMonitor bind(mon);
      cohort::Checkpointer ckpt(dir, ctx, cohort::CheckpointOptions{});
      const cohort::TrainingState state{model.ptr().get(), &sgd, nullptr};
      for (int s = 0; s < 7; ++s) {
        cohort::monitor().step();
        ckpt.maybe_save(state);
      }
      ckpt.save(state);
    }
    cohort::Monitor fresh(opts());
    cohort::ScopedMonitor bind(fresh);
    cohort::Checkpointer ckpt(dir, ctx, cohort::CheckpointOptions{});
    ASSERT_TRUE(ckpt.restore_latest(cohort::TrainingState{model.ptr().get(), &sgd, nullptr}).has_value());
    EXPECT_EQ(cohort::monitor().current_step(), 7);
    cohort::monitor().step();
    EXPECT_EQ(cohort::monitor().last()->step, 8);
  });
  std::filesystem::remove_all(dir);
}

}  // namespace
