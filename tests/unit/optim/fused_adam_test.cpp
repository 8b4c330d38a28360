// FusedAdam / FusedAdamW against libtorch's Adam / AdamW: the same parameters and state after K
// steps (≤ 1e-6 relative, float rounding only) with weight decay on and off and with amsgrad;
// bitwise the same on every rank of a DDP job and with any number of intra-op threads; the base
// class's step for what the fused loop does not handle; and checkpoints that move between the
// fused and the plain optimizer in both directions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "checkpoint/format/training_state.h"
#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/fused_adam.h"
#include "optim/aten_fused_adam.h"
#include "support/ddp_fixtures.h"
#include "support/optim_fixtures.h"
#include "support/thread_ranks.h"
#include "runtime/torch_compat_internal.h"

namespace fs = std::filesystem;
using namespace cohort::testing;

namespace {

constexpr double kRelTol = 1e-6;

// Every tensor a checkpoint of `opt` holds, in a fixed order, plus the parameters.
template <typename State>
std::vector<torch::Tensor> state_of(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) {
    out.push_back(p.detach());
    const auto& s = static_cast<const State&>(*opt.state().at(cohort::optimizer_state_key<std::decay_t<decltype(opt.state())>>(p)));
    out.push_back(torch::tensor(static_cast<double>(s.step())));
    out.push_back(s.exp_avg());
    out.push_back(s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) out.push_back(s.max_exp_avg_sq());
  }
  return out;
}

template <typename Ref, typename Fused, typename State, typename Options>
double max_relative_diff_after(const Options& options, int steps) {
  auto a = make_params(), b = clone_params(a);
  Ref ref(a, options);
  Fused fused(b, options);
  step_both(ref, a, fused, b, 0, steps);
  const auto want = state_of<State>(ref, a), got = state_of<State>(fused, b);
  EXPECT_EQ(want.size(), got.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, relative_diff(got[i], want[i]));
  return worst;
}

struct AdamCase {
  double weight_decay;
  bool amsgrad;
};
void PrintTo(const AdamCase& c, std::ostream* os) { *os << "weight_decay " << c.weight_decay << (c.amsgrad ? " amsgrad" : ""); }

class FusedAdamMatches : public ::testing::TestWithParam<AdamCase> {};

TEST_P(FusedAdamMatches, LibtorchAdam) {
  const auto c = GetParam();
  const double d = max_relative_diff_after<torch::optim::Adam, cohort::FusedAdam, torch::optim::AdamParamState>(
      torch::optim::AdamOptions(1e-2).weight_decay(c.weight_decay).amsgrad(c.amsgrad), 25);
  EXPECT_LE(d, kRelTol);
}

TEST_P(FusedAdamMatches, LibtorchAdamW) {
  const auto c = GetParam();
  const double d = max_relative_diff_after<torch::optim::AdamW, cohort::FusedAdamW, torch::optim::AdamWParamState>(
      torch::optim::AdamWOptions(1e-2).weight_decay(c.weight_decay).amsgrad(c.amsgrad), 25);
  EXPECT_LE(d, kRelTol);
}

// ATen's multi-tensor kernel, the path FusedAdam(W) takes for CUDA parameters on libtorch 2.x
// (aten_fused_adam.h), checked here on CPU tensors (ATen has the kernel for the CPU too since 2.4):
// libtorch's formulas and libtorch's state. The CUDA test (cuda_test.cpp) runs it where it runs.
template <typename Base, typename Options, typename State>
class AtenFused : public Base {
 public:
  using Base::Base;
  torch::Tensor step(torch::optim::Optimizer::LossClosure = nullptr) override {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE((cohort::detail::aten_fusable_step<Options, State>(this->param_groups_, this->state_, /*allow_cpu=*/true)));
    cohort::detail::aten_fused_step<Options, State>(this->param_groups_, this->state_,
                                                    std::is_same_v<Base, torch::optim::AdamW>);
    return {};
  }
};

TEST_P(FusedAdamMatches, AtensFusedKernelOnThisLibtorch) {
  if (!cohort::detail::aten_fused_adam_available())
    GTEST_SKIP() << "libtorch 1.13 has no fused Adam kernel: FusedAdam(W) on CUDA takes the base class's step there";
  const auto c = GetParam();
  using AtenAdam = AtenFused<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>;
  using AtenAdamW = AtenFused<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>;
  EXPECT_LE((max_relative_diff_after<torch::optim::Adam, AtenAdam, torch::optim::AdamParamState>(
                torch::optim::AdamOptions(1e-2).weight_decay(c.weight_decay).amsgrad(c.amsgrad), 25)),
            kRelTol);
  EXPECT_LE((max_relative_diff_after<torch::optim::AdamW, AtenAdamW, torch::optim::AdamWParamState>(
                torch::optim::AdamWOptions(1e-2).weight_decay(c.weight_decay).amsgrad(c.amsgrad), 25)),
            kRelTol);
}

INSTANTIATE_TEST_SUITE_P(Options, FusedAdamMatches,
                         ::testing::Values(AdamCase{0, false}, AdamCase{0.1, false}, AdamCase{0, true}, AdamCase{0.1, true}),
                         [](const auto& info) {
                           return std::string(info.param.weight_decay ? "decay" : "no_decay") +
                                  (info.param.amsgrad ? "_amsgrad" : "");
                         });

// The comparison can fail: Adam's L2 decay against AdamW's decoupled decay is far outside it.
TEST(FusedAdam, ToleranceTellsTheFormulasApart) {
  auto a = make_params(), b = clone_params(a);
  torch::optim::Adam ref(a, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
  cohort::FusedAdamW other(b, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  step_both(ref, a, other, b, 0, 5);
  EXPECT_GT(relative_diff(b[0], a[0]), 100 * kRelTol);
}

// Element-wise, so the split over intra-op threads cannot change a bit.
TEST(FusedAdam, BitwiseTheSameWithOneOrTwoThreads) {
  const int before = at::get_num_threads();
  std::vector<std::vector<torch::Tensor>> results;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    auto ps = make_params();
    cohort::FusedAdam opt(ps, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
    for (int s = 0; s < 5; ++s) {
      set_grads(ps, s);
      opt.step();
    }
    results.push_back(state_of<torch::optim::AdamParamState>(opt, ps));
  }
  at::set_num_threads(before);
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(torch::equal(results[0][i], results[1][i])) << i;
}

// Double parameters, or a non-contiguous one among float ones: the whole step is the base class's.
TEST(FusedAdam, FallsBackToTheBaseClassBitwise) {
  auto check = [](std::vector<torch::Tensor> a) {
    auto b = clone_params(a);
    for (size_t i = 0; i < a.size(); ++i)  // keep the layout: clone() of a transposed view stays transposed
      if (!a[i].is_contiguous()) b[i] = a[i].detach().clone(torch::MemoryFormat::Preserve).set_requires_grad(true);
    torch::optim::Adam ref(a, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
    cohort::FusedAdam fused(b, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
    step_both(ref, a, fused, b, 0, 4);
    const auto want = state_of<torch::optim::AdamParamState>(ref, a), got = state_of<torch::optim::AdamParamState>(fused, b);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  };
  check(make_params(torch::kDouble));
  auto mixed = make_params();
  mixed.push_back(torch::randn({6, 4}).t().set_requires_grad(true));  // a leaf that is not contiguous
  ASSERT_FALSE(mixed.back().is_contiguous());
  check(mixed);
}

TEST(FusedAdam, ClosureLossAndVersionCounters) {
  auto ps = make_params();
  cohort::FusedAdam opt(ps, torch::optim::AdamOptions(1e-2));
  const auto v0 = ps[0]._version();
  auto loss = opt.step([&] {
    set_grads(ps, 0);
    return torch::tensor(3.5);
  });
  EXPECT_EQ(loss.item<double>(), 3.5);
  EXPECT_GT(ps[0]._version(), v0);  // like the base class's in-place update
}

// A DDP job with FusedAdam: every rank ends with bitwise the same parameters and state.
TEST(FusedAdam, BitwiseEqualAcrossDdpRanks) {
  const int world = 3;
  const auto init = initial_parameters(7);
  const auto batches = make_batches(5, 3 * 4);
  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> states(world);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    load_parameters(*net, init);
    auto model = cohort::DistributedDataParallel(net, ctx);
    auto params = model->parameters();
    cohort::FusedAdamW opt(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
    const int r = ctx->rank();
    for (const auto& b : batches) {
      opt.zero_grad();
      torch::nll_loss(model->forward(b.x.narrow(0, r * 4, 4)), b.y.narrow(0, r * 4, 4)).backward();
      opt.step();
    }
    auto s = state_of<torch::optim::AdamWParamState>(opt, params);
    std::lock_guard<std::mutex> lock(mu);
    states[r] = s;
  });
  for (int r = 1; r < world; ++r)
    for (size_t i = 0; i < states[0].size(); ++i) EXPECT_TRUE(torch::equal(states[r][i], states[0][i])) << r << " " << i;
}

// Saved with one optimizer, restored into the other: the restored state is bitwise the saved one,
// and training on continues the same way.
template <typename Saver, typename Restorer>
void round_trip(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_fused_adam_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto init = initial_parameters(5);
  const auto batches = make_batches(6, 2 * 4);
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    auto train = [&](auto& model, torch::optim::Optimizer& opt, int from, int to) {
      for (int s = from; s < to; ++s) {
        opt.zero_grad();
        torch::nll_loss(model->forward(batches[s].x.narrow(0, r * 4, 4)), batches[s].y.narrow(0, r * 4, 4)).backward();
        opt.step();
      }
    };
    SmallNet a;
    load_parameters(*a, init);
    auto m1 = cohort::DistributedDataParallel(a, ctx);
    Saver o1(m1->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(0.05));
    train(m1, o1, 0, 3);
    cohort::Checkpointer saver(dir.string(), ctx);
    saver.set_step(3);
    saver.save({&*m1, &o1, nullptr});
    std::string d1, d2;
    const auto saved = cohort::ckpt::optimizer_tensors(o1, *m1, &d1, r);

    SmallNet b;
    auto m2 = cohort::DistributedDataParallel(b, ctx);
    Restorer o2(m2->parameters(), torch::optim::AdamOptions(1e-2).weight_decay(0.05));
    cohort::Checkpointer restorer(dir.string(), ctx);
    ASSERT_TRUE(restorer.restore_latest({&*m2, &o2, nullptr}).has_value());
    const auto restored = cohort::ckpt::optimizer_tensors(o2, *m2, &d2, r);
    ASSERT_EQ(saved.size(), restored.size());
    ASSERT_GT(saved.size(), 0u);
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ(saved[i].first, restored[i].first);
      EXPECT_TRUE(torch::equal(saved[i].second, restored[i].second)) << saved[i].first;
    }
    const auto p1 = snapshot(*m1->module()), p2 = snapshot(*m2->module());
    for (size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(torch::equal(p1[i], p2[i]));
    // Three more steps each: the fused and the plain optimizer agree to rounding.
    train(m1, o1, 3, 6);
    train(m2, o2, 3, 6);
    const auto q1 = snapshot(*m1->module()), q2 = snapshot(*m2->module());
    for (size_t i = 0; i < q1.size(); ++i) EXPECT_LE(relative_diff(q2[i], q1[i]), kRelTol);
  });
  fs::remove_all(dir);
}

TEST(FusedAdamCheckpoint, SavedFusedRestoresIntoLibtorchAdam) { round_trip<cohort::FusedAdam, torch::optim::Adam>("to_adam"); }
TEST(FusedAdamCheckpoint, SavedLibtorchAdamRestoresIntoFused) { round_trip<torch::optim::Adam, cohort::FusedAdam>("to_fused"); }

}  // namespace
