// FusedSGD against libtorch's SGD: bitwise the same parameters and momentum buffers after K steps
// (where the CPU has FMA; within float rounding elsewhere) with momentum, dampening, Nesterov and
// weight decay on and off; the base class's step for what the fused loop does not handle; and
// optimizer state that moves between the fused and the plain optimizer in both directions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

#include "cohort/fused_sgd.h"
#include "cohort/torch_compat.h"
#include "support/optim_fixtures.h"
#include "runtime/torch_compat_internal.h"

using namespace cohort::testing;

namespace {

struct SgdCase {
  const char* name;
  double momentum, dampening, weight_decay;
  bool nesterov;
};

torch::optim::SGDOptions options_of(const SgdCase& c) {
  return torch::optim::SGDOptions(0.05).momentum(c.momentum).dampening(c.dampening).weight_decay(c.weight_decay).nesterov(
      c.nesterov);
}

// Parameters, then each momentum buffer (when there is one).
std::vector<torch::Tensor> sgd_state_of(torch::optim::SGD& opt, const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) {
    out.push_back(p.detach());
    auto it = opt.state().find(cohort::optimizer_state_key<std::decay_t<decltype(opt.state())>>(p));
    if (it != opt.state().end())
      out.push_back(static_cast<const torch::optim::SGDParamState&>(*it->second).momentum_buffer());
  }
  return out;
}

// ATen's vectorised add-with-alpha is a fused multiply-add; ours is one too where the CPU has FMA.
bool cpu_has_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void expect_same(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (cpu_has_fma()) {
      EXPECT_TRUE(torch::equal(got[i], want[i])) << "tensor " << i << ": relative diff " << relative_diff(got[i], want[i]);
    } else {
      EXPECT_LE(relative_diff(got[i], want[i]), 1e-6) << "tensor " << i;
    }
  }
}

class FusedSgdMatches : public ::testing::TestWithParam<SgdCase> {};

TEST_P(FusedSgdMatches, LibtorchSgdAfterTwentyFiveSteps) {
  auto a = make_params(), b = clone_params(a);
  torch::optim::SGD ref(a, options_of(GetParam()));
  cohort::FusedSGD fused(b, options_of(GetParam()));
  step_both(ref, a, fused, b, 0, 25);
  expect_same(sgd_state_of(fused, b), sgd_state_of(ref, a));
}

INSTANTIATE_TEST_SUITE_P(Options, FusedSgdMatches,
                         ::testing::Values(SgdCase{"momentum", 0.9, 0, 0, false}, SgdCase{"dampening", 0.9, 0.3, 0, false},
                                           SgdCase{"nesterov", 0.9, 0, 0, true}, SgdCase{"weight_decay", 0.9, 0, 1e-2, false},
                                           SgdCase{"all", 0.8, 0, 1e-2, true}, SgdCase{"plain", 0, 0, 0, false},
                                           SgdCase{"plain_decay", 0, 0, 1e-2, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// The comparison can fail: a different momentum is told apart.
TEST(FusedSgd, ComparisonTellsAnotherMomentumApart) {
  auto a = make_params(), b = clone_params(a);
  torch::optim::SGD ref(a, torch::optim::SGDOptions(0.05).momentum(0.9));
  cohort::FusedSGD fused(b, torch::optim::SGDOptions(0.05).momentum(0.89));
  step_both(ref, a, fused, b, 0, 3);
  EXPECT_GT(relative_diff(b[0], a[0]), 1e-5);
}

TEST(FusedSgd, FallsBackToTheBaseClassBitwiseForOtherDtypes) {
  auto a = make_params(torch::kDouble), b = clone_params(a);
  torch::optim::SGD ref(a, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2));
  cohort::FusedSGD fused(b, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2));
  step_both(ref, a, fused, b, 0, 5);
  auto want = sgd_state_of(ref, a), got = sgd_state_of(fused, b);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

TEST(FusedSgd, ClosureLossAndVersionCounters) {
  auto ps = make_params();
  cohort::FusedSGD opt(ps, torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto v0 = ps[0]._version();
  auto loss = opt.step([&] {
    set_grads(ps, 0);
    return torch::tensor(2.5);
  });
  EXPECT_EQ(loss.item<double>(), 2.5);
  EXPECT_GT(ps[0]._version(), v0);  // like the base class's in-place update
}

// State saved from one optimizer loads into the other, and training on gives the same result as
// never switching.
template <typename Saver, typename Loader>
void switch_midway() {
  auto a = make_params(), b = clone_params(a);
  const auto options = torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true);
  torch::optim::SGD straight(a, options);
  Saver first(b, options);
  step_both(straight, a, first, b, 0, 4);
  std::stringstream saved;
  {
    torch::serialize::OutputArchive archive;
    first.save(archive);
    archive.save_to(saved);
  }
  Loader second(b, options);
  {
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    second.load(archive);
  }
  step_both(straight, a, second, b, 4, 8);
  expect_same(sgd_state_of(second, b), sgd_state_of(straight, a));
}

TEST(FusedSgdCheckpoint, SavedFusedLoadsIntoLibtorchSgd) { switch_midway<cohort::FusedSGD, torch::optim::SGD>(); }
TEST(FusedSgdCheckpoint, SavedLibtorchSgdLoadsIntoFused) { switch_midway<torch::optim::SGD, cohort::FusedSGD>(); }

}  // namespace
