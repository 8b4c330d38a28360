// The pipeline executor (issue 47) with ranks as threads over the mesh's pp group: every schedule's
// gradients and loss equal single-process gradient accumulation over the same microbatches, bit for
// bit; ranks running different lists fail with a line naming the stage and the microbatch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/stages.h"
#include "parallel/pipeline/tied.h"
#include "support/thread_ranks.h"

namespace cohort::pipeline {
namespace {

constexpr int kWidth = 6;

// The ranks are threads of one process and share its random generator: one draws at a time.
std::mutex rng_mutex;

// S stages of Linear + Tanh, the same on every rank (one seed).
std::vector<torch::nn::Sequential> make_stages(int S) {
  std::lock_guard<std::mutex> lock(rng_mutex);
  torch::manual_seed(7);
  std::vector<torch::nn::Sequential> out;
  for (int s = 0; s < S; ++s) out.push_back(torch::nn::Sequential(torch::nn::Linear(kWidth, kWidth), torch::nn::Tanh()));
  return out;
}

StepData make_data(int m) {
  std::lock_guard<std::mutex> lock(rng_mutex);
  torch::manual_seed(11);
  StepData d;
  for (int i = 0; i < m; ++i) {
    d.inputs.push_back(torch::randn({3, kWidth}));
    d.targets.push_back(torch::randn({3, kWidth}));
  }
  return d;
}

at::Tensor mse(const at::Tensor& out, const at::Tensor& target) { return torch::mse_loss(out, target); }

struct Reference {
  std::vector<std::vector<at::Tensor>> grads;  // per stage, per parameter
  double loss = 0;
};

// One process, the whole model, microbatch after microbatch (gradient accumulation).
Reference reference(int S, const StepData& d) {
  auto stages = make_stages(S);
  const int m = static_cast<int>(d.inputs.size());
  Reference r;
  for (int i = 0; i < m; ++i) {
    at::Tensor x = d.inputs[i];
    for (auto& st : stages) x = st->forward(x);
    const at::Tensor l = mse(x, d.targets[i]);
    r.loss += l.item<double>();
    (l / m).backward();
  }
  r.loss /= m;
  for (auto& st : stages) {
    r.grads.emplace_back();
    for (const auto& p : st->parameters()) r.grads.back().push_back(p.grad().clone());
  }
  return r;
}

void expect_like_one_process(ScheduleKind kind, int p, int v, int m) {
  const Schedule schedule = make_schedule(kind, p, v, m);
  const StepData data = make_data(m);
  const Reference ref = reference(p * v, data);
  testing::run_ranks(p, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", p}});
    const int rank = mesh.coordinate("pp");
    auto all = make_stages(p * v);
    std::map<int, torch::nn::Sequential> mine;
    for (int s = rank; s < p * v; s += p) mine[s] = all[s];
    const double loss = run_schedule(schedule, rank, mine, *mesh.group("pp"), data, mse);
    const std::string what = std::string(schedule_name(kind)) + " p=" + std::to_string(p) + " v=" + std::to_string(v) +
                             " m=" + std::to_string(m) + " rank " + std::to_string(rank);
    if (schedule.rank_of(p * v - 1) == rank) {
      EXPECT_EQ(loss, ref.loss) << what;
    }
    for (auto& [s, module] : mine) {
      const auto params = module->parameters();
      for (size_t k = 0; k < params.size(); ++k)
        EXPECT_TRUE(torch::equal(params[k].grad(), ref.grads[s][k])) << what << " stage " << s << " parameter " << k;
    }
  });
}

TEST(PipelineExecutor, EveryScheduleGivesOneProcesssGradientsBitwise) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1}) {
    expect_like_one_process(kind, 2, 1, 4);
    expect_like_one_process(kind, 3, 1, 5);
    expect_like_one_process(kind, 4, 1, 2);  // fewer microbatches than stages
  }
  expect_like_one_process(ScheduleKind::interleaved_1f1b, 2, 2, 4);
  expect_like_one_process(ScheduleKind::interleaved_1f1b, 4, 2, 4);
}

// Issue 47's "no hangs": short steps of every schedule on Gloo, of random pipeline depth and
// microbatch count (the same draws on every rank), each ending on every rank with one process's loss
// over the same stages and data (checked on the last stage). A hang fails at the collective timeout
// (20 s) instead of waiting out the test's. 12 steps per schedule here (a few seconds);
// COHORT_PIPELINE_STEPS=500 runs the 500 per schedule (about 95 s on the 2-core machine).
TEST(PipelineExecutor, RandomShortStepsOfEveryScheduleNeverHang) {
  const char* env = std::getenv("COHORT_PIPELINE_STEPS");
  const int per_schedule = env ? std::max(3, std::atoi(env)) : 12;
  const ScheduleKind kinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b,
                                ScheduleKind::zb_h1};
  testing::RankOptions options;
  options.init.collective_timeout = std::chrono::seconds(20);
  std::map<ScheduleKind, int> runs;
  for (int p = 2; p <= 4; ++p) {
    const int steps = per_schedule / 3 + (p == 4 ? per_schedule % 3 : 0);  // per schedule at this depth
    // Drawn once, before the ranks start: every rank runs the same list of steps.
    std::mt19937 draw(1234 + p);
    std::vector<std::pair<ScheduleKind, int>> plan;
    std::map<std::pair<int, int>, double> losses;  // per (v, m): one process's loss, same stages and data
    for (int i = 0; i < 4 * steps; ++i) {
      const ScheduleKind kind = kinds[i % 4];
      const int v = kind == ScheduleKind::interleaved_1f1b ? 2 : 1;
      const int m = v == 2 ? p * (1 + draw() % 3) : 1 + draw() % 8;
      plan.emplace_back(kind, m);
      if (!losses.count({v, m})) losses[{v, m}] = reference(p * v, make_data(m)).loss;
      ++runs[kind];
    }
    testing::run_ranks(
        p,
        [&](std::shared_ptr<Context> ctx) {
          DeviceMesh mesh(ctx, {{"pp", p}});
          const int rank = mesh.coordinate("pp");
          for (const auto& [kind, m] : plan) {
            const int v = kind == ScheduleKind::interleaved_1f1b ? 2 : 1;
            auto all = make_stages(p * v);
            std::map<int, torch::nn::Sequential> mine;
            for (int s = rank; s < p * v; s += p) mine[s] = all[s];
            const double loss = run_schedule(make_schedule(kind, p, v, m), rank, mine, *mesh.group("pp"), make_data(m), mse);
            if (rank == p - 1) {
              EXPECT_EQ(loss, (losses.at({v, m}))) << schedule_name(kind) << " p=" << p << " m=" << m;
            }
          }
        },
        options);
  }
  for (ScheduleKind kind : kinds) EXPECT_EQ(runs[kind], per_schedule) << schedule_name(kind);
}

// pp x dp on one mesh: two pipelines of 2 stages, each on half of the microbatches, their gradients
// averaged over the dp group: one process's accumulation over all of them (to rounding: the sums
// associate differently).
TEST(PipelineExecutor, PipelinesOnAMeshComposeWithDataParallelism) {
  const int m = 4, pp = 2, dp = 2;
  const StepData all_data = make_data(m);
  const Reference ref = reference(pp, all_data);
  testing::run_ranks(pp * dp, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", pp}, {"dp", dp}});
    const int stage = mesh.coordinate("pp"), replica = mesh.coordinate("dp");
    StepData half;
    for (int i = replica * m / dp; i < (replica + 1) * m / dp; ++i) {
      half.inputs.push_back(all_data.inputs[i]);
      half.targets.push_back(all_data.targets[i]);
    }
    auto all = make_stages(pp);
    std::map<int, torch::nn::Sequential> mine{{stage, all[stage]}};
    run_schedule(make_schedule(ScheduleKind::one_f_one_b, pp, 1, m / dp), stage, mine, *mesh.group("pp"), half, mse);
    const auto params = all[stage]->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<at::Tensor> g{params[k].grad()};
      mesh.group("dp")->allreduce(g)->wait();
      EXPECT_TRUE(torch::allclose(g[0] / dp, ref.grads[stage][k], 1e-5, 1e-7))
          << "rank " << ctx->rank() << " stage " << stage << " parameter " << k;
    }
  });
}

// One model cut into stages (stages_of_rank): the stages share its layers, and training them over
// the pipeline gives the whole model's gradients, the same tensors as one process's.
TEST(PipelineExecutor, AModelCutIntoStagesTrainsAsAWhole) {
  const int p = 2, v = 2, m = 4;
  const StepData data = make_data(m);
  const Reference ref = reference(p * v, data);
  const Schedule schedule = make_schedule(ScheduleKind::interleaved_1f1b, p, v, m);
  testing::run_ranks(p, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", p}});
    torch::nn::Sequential model;
    for (auto& stage : make_stages(p * v))
      for (auto& layer : *stage) model->push_back(layer);  // 8 layers: Linear, Tanh, ...
    auto mine = stages_of_rank(model, schedule, mesh.coordinate("pp"), ctx->rank());
    ASSERT_EQ(mine.size(), 2u);
    run_schedule(schedule, mesh.coordinate("pp"), mine, *mesh.group("pp"), data, mse);
    for (auto& [s, stage] : mine) {
      const auto params = stage->parameters();
      ASSERT_EQ(params.size(), 2u);
      // Layer 2s is stage s's Linear: its parameters are the model's own.
      EXPECT_TRUE(params[0].is_same(model[2 * s]->parameters()[0]));
      for (size_t k = 0; k < params.size(); ++k)
        EXPECT_TRUE(torch::equal(params[k].grad(), ref.grads[s][k])) << "stage " << s << " parameter " << k;
    }
  });
  try {
    stages_of_rank(torch::nn::Sequential(torch::nn::Tanh(), torch::nn::Tanh(), torch::nn::Tanh()), schedule, 0, 0);
    ADD_FAILURE() << "3 layers cut into 4 stages";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0: pipeline: the model's 3 layers do not divide into 4 stages (2 pipeline "
                                     "ranks x 2 stages per rank); give a layer count that is a multiple of the stages");
  }
}

// A layer used by the first and the last stage (as the GPT ties its embedding and head): each end
// holds a copy, TiedGradients sums their gradients, and both equal the one shared layer's gradient
// of one process (to rounding: the sum is taken in another order).
TEST(PipelineExecutor, TiedParametersOfTheFirstAndLastStagesSumTheirGradients) {
  const int p = 2, m = 3;
  const StepData data = make_data(m);
  auto make_layers = [] {
    std::lock_guard<std::mutex> lock(rng_mutex);
    torch::manual_seed(21);
    return std::make_pair(torch::nn::Linear(kWidth, kWidth), torch::nn::Linear(kWidth, kWidth));
  };
  auto [tied, middle] = make_layers();  // one process: x -> tied -> tanh -> middle -> tanh -> tied
  for (int i = 0; i < m; ++i) {
    const at::Tensor y = tied(torch::tanh(middle(torch::tanh(tied(data.inputs[i])))));
    (mse(y, data.targets[i]) / m).backward();
  }
  const Schedule schedule = make_schedule(ScheduleKind::one_f_one_b, p, 1, m);
  testing::run_ranks(p, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", p}});
    TiedGradients tie(ctx, mesh, schedule);
    EXPECT_TRUE(tie.holds());
    auto [my_tied, my_middle] = make_layers();  // this rank's copies
    const int rank = mesh.coordinate("pp");
    std::map<int, torch::nn::Sequential> mine;
    if (rank == 0) mine[0] = torch::nn::Sequential(my_tied, torch::nn::Tanh());
    if (rank == 1) mine[1] = torch::nn::Sequential(my_middle, torch::nn::Tanh(), my_tied);
    run_schedule(schedule, rank, mine, *mesh.group("pp"), data, mse);
    tie.sum(my_tied->parameters());
    const auto want = tied->parameters();
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_TRUE(torch::allclose(my_tied->parameters()[k].grad(), want[k].grad(), 1e-5, 1e-7)) << "rank " << rank << " " << k;
    }
  });
}

TEST(PipelineExecutor, RanksRunningDifferentListsFailNamingStageAndMicrobatch) {
  // Rank 0 runs its forwards in the other order: rank 1 receives microbatch 1 where it expects 0.
  Schedule schedule = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  auto& first = schedule.actions[0];
  std::swap(first[0], first[2]);  // 0F1, 0SEND_F0, 0F0, 0SEND_F1 -> sends need their forwards: swap both
  std::swap(first[1], first[3]);
  const StepData data = make_data(2);
  testing::RankOptions options;
  options.init.collective_timeout = std::chrono::seconds(20);
  const auto errors = testing::run_ranks_collect(
      2,
      [&](std::shared_ptr<Context> ctx) {
        DeviceMesh mesh(ctx, {{"pp", 2}});
        auto all = make_stages(2);
        std::map<int, torch::nn::Sequential> mine{{ctx->rank(), all[ctx->rank()]}};
        run_schedule(schedule, ctx->rank(), mine, *mesh.group("pp"), data, mse);
      },
      options);
  ASSERT_TRUE(errors[1]);
  try {
    std::rethrow_exception(errors[1]);
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "rank 1: pipeline: expected the activation of stage 0, microbatch 0 from rank 0 but received stage 0, "
              "microbatch 1: the ranks run different schedules or microbatch counts");
  }
  EXPECT_TRUE(errors[0]) << "rank 0 finished although rank 1 never sent its gradients";
}

}  // namespace
}  // namespace cohort::pipeline
