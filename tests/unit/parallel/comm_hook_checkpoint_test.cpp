// A comm hook's state in checkpoints (CommHook::state(), RankStateCheckpointable): PowerSGD
// resumed from a checkpoint goes on bitwise as if never stopped, error feedback and warm-started
// Qs included; on another world size it keeps its step count and Qs and starts its errors from
// zero; a damaged rank-state file sends every rank back to the previous checkpoint.
// Ranks are threads (thread_ranks.h).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "cohort/checkpointer.h"
#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

constexpr int kRows = 4;  // per rank and step

PowerSGDOptions powersgd(uint64_t seed = 7) {
  PowerSGDOptions o;
  o.rank = 2;
  o.start_step = 2;  // compressing from the third step: the checkpoint at 4 holds errors and Qs
  o.seed = seed;
  return o;
}

struct Trained {
  std::vector<std::vector<torch::Tensor>> params;  // per rank
  std::vector<RankState> hook;                     // per rank, after restore (copies)
};

// Trains SmallNet on `world` ranks from step `first` (restored from `dir` when resume) to `total`;
// saves every `every` steps up to `save_until`.
Trained train(const fs::path& dir, int world, bool resume, int total, int every, int save_until, PowerSGDOptions o) {
  const auto init = initial_parameters(3);
  const auto batches = make_batches(total, 2 * kRows, 5);  // a global batch of two ranks' rows
  Trained out;
  out.params.resize(world);
  out.hook.resize(world);
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    SmallNet net;
    load_parameters(*net, resume ? initial_parameters(99) : init);
    DDPOptions options;
    options.bucket_cap_mb = 0.004;  // several buckets
    options.first_bucket_cap_mb = 0.001;
    auto hook = powersgd_hook(o);
    options.comm_hook = hook;
    auto model = DistributedDataParallel(net, ctx, options);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    Checkpointer checkpoints(dir.string(), ctx, {.every_steps = every, .async = false});
    int first = 0;
    if (resume) {
      const auto info = checkpoints.restore_latest({&*model, &sgd, nullptr});
      ASSERT_TRUE(info.has_value());
      first = static_cast<int>(info->step);
      RankState s = hook->state();
      for (auto& [name, t] : s.tensors) t = t.clone();
      out.hook[r] = s;
    }
    const int64_t rows = 2 * kRows / world;
    for (int step = first; step < total; ++step) {
      sgd.zero_grad();
      const auto& b = batches[step];
      torch::nll_loss(model->forward(b.x.narrow(0, r * rows, rows)), b.y.narrow(0, r * rows, rows)).backward();
      sgd.step();
      if (step < save_until) checkpoints.maybe_save({&*model, &sgd, nullptr});
    }
    out.params[r] = snapshot(*model->module());
  });
  return out;
}

bool equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return a.size() == b.size();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("cohort_hook_ckpt_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(CommHookCheckpoint, PowerSGDResumesBitwiseWithItsErrorsAndQs) {
  TempDir dir;
  const auto straight = train(dir.path, 2, false, 8, 4, 4, powersgd());
  ASSERT_TRUE(fs::exists(dir.path / "step-00000004" / "rank-00001-of-00002.safetensors"));
  const auto resumed = train(dir.path, 2, true, 8, 4, 0, powersgd());
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(equal(straight.params[r], resumed.params[r])) << "rank " << r;
  // The saved state: the step count, and per bucket the error, P and Q.
  const auto text = nlohmann::json::parse(resumed.hook[0].text);
  EXPECT_EQ(text.at("step").get<int64_t>(), 4);
  int errors = 0;
  for (const auto& [name, t] : resumed.hook[0].tensors) errors += name.rfind("error/", 0) == 0;
  EXPECT_GT(errors, 0);
  // Without the hook's state (another seed: the restore says so and starts the hook afresh) the
  // same restore trains differently: the state above is what made it bitwise.
  const auto fresh = train(dir.path, 2, true, 8, 4, 0, powersgd(8));
  EXPECT_FALSE(equal(straight.params[0], fresh.params[0]));
  EXPECT_EQ(fresh.hook[0].tensors.size(), 0u);
}

TEST(CommHookCheckpoint, AnotherWorldSizeKeepsTheStepAndQsAndZeroesTheErrors) {
  TempDir dir;
  train(dir.path, 2, false, 6, 4, 4, powersgd());
  // What each rank saved, read back through a 2-rank restore; then one rank takes rank 0's.
  const auto saved = train(dir.path, 2, true, 4, 4, 0, powersgd()).hook;
  const auto one = train(dir.path, 1, true, 4, 4, 0, powersgd()).hook;
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(one[0].text).at("step").get<int64_t>(), 4);
  int qs = 0;
  for (const auto& [name, t] : one[0].tensors) {
    EXPECT_NE(name.rfind("error/", 0), 0u) << name << ": a rank's residual does not carry to another world size";
    if (name.rfind("q/", 0) != 0) continue;
    ++qs;
    for (const auto& [saved_name, saved_t] : saved[0].tensors)
      if (saved_name == name) EXPECT_TRUE(torch::equal(t, saved_t)) << name;
  }
  EXPECT_GT(qs, 0);
}

TEST(CommHookCheckpoint, ADamagedRankStateFileMakesEveryRankTakeThePreviousCheckpoint) {
  TempDir dir;
  train(dir.path, 2, false, 4, 2, 4, powersgd());  // checkpoints at 2 and 4
  const fs::path file = dir.path / "step-00000004" / "rank-00001-of-00002.safetensors";
  ASSERT_TRUE(fs::exists(file));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  const auto resumed = train(dir.path, 2, true, 4, 2, 0, powersgd());
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(nlohmann::json::parse(resumed.hook[r].text).at("step").get<int64_t>(), 2) << "rank " << r;
}
