// DDP communication hooks (cohort/comm_hook.h): the 16-bit casts and PowerSGD average what the
// built-in allreduce averages (bitwise where the arithmetic is the same, within their precision
// otherwise), every rank ends bitwise equal, fewer bytes go on the wire, and bad hooks or settings
// are one clear error on every rank.
#include <gtest/gtest.h>

#include <stdexcept>

#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "support/comm_runs.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"

namespace {

using namespace cohort::testing;

TEST(CommHookCast, Fp16AveragesWithinHalfPrecisionWithHalfTheBytesAndEqualRanks) {
  const auto plain = train(2, 4, 4, 16, nullptr);
  const auto fp16 = train(2, 4, 4, 16, [] { return cohort::fp16_compress_hook(); });
  expect_ranks_bitwise_equal(fp16);
  expect_close(fp16.params[0], plain.params[0], 2e-3, 2e-3);
  bool differs = false;
  for (size_t i = 0; i < plain.params[0].size(); ++i) differs |= !torch::equal(fp16.params[0][i], plain.params[0][i]);
  EXPECT_TRUE(differs) << "the fp16 hook changed nothing: was it called?";
  const auto& s = fp16.stats[0];
  EXPECT_GT(s.bytes_on_wire, 0);
  // Half the gradient bytes, plus the used flags' one small float allreduce.
  EXPECT_LT(static_cast<double>(s.bytes_on_wire), 0.55 * static_cast<double>(s.bytes_allreduced));
}

TEST(CommHookCast, Bf16OverThreeRanksSumsInTheRingWithPaddingAndEqualRanks) {
  // bf16 goes through cohort's own ring on Gloo; 3 ranks make bucket sizes that do not divide.
  const auto plain = train(3, 3, 2, 16, nullptr);
  const auto bf16 = train(3, 3, 2, 16, [] { return cohort::bf16_compress_hook(); });
  expect_ranks_bitwise_equal(bf16);
  expect_close(bf16.params[0], plain.params[0], 2e-2, 2e-2);
  EXPECT_LT(static_cast<double>(bf16.stats[0].bytes_on_wire), 0.55 * static_cast<double>(bf16.stats[0].bytes_allreduced));
}

TEST(CommHookPowerSGD, BeforeStartStepItIsBitwiseTheBuiltInAllreduce) {
  cohort::PowerSGDOptions o;
  o.rank = 2;
  o.start_step = 100;
  const auto plain = train(2, 3, 4, 16, nullptr);
  const auto psgd = train(2, 3, 4, 16, [o] { return cohort::powersgd_hook(o); });
  for (size_t i = 0; i < plain.params[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(psgd.params[0][i], plain.params[0][i])) << "tensor " << i;
  }
}

TEST(CommHookPowerSGD, ExactOnGradientsOfLowRankWithFarFewerBytesAndEqualRanks) {
  // 2 ranks x 2 samples: every weight gradient has rank <= 4, which rank-4 PowerSGD reproduces
  // exactly (P spans the averaged gradient's columns), error feedback averaging to zero.
  cohort::PowerSGDOptions o;
  o.rank = 4;
  o.start_step = 1;
  const auto plain = train(2, 5, 2, 64, nullptr);
  const auto psgd = train(2, 5, 2, 64, [o] { return cohort::powersgd_hook(o); });
  expect_ranks_bitwise_equal(psgd);
  cohort::PowerSGDOptions o1 = o;
  o1.rank = 1;
  const auto rank1 = train(2, 5, 2, 64, [o1] { return cohort::powersgd_hook(o1); });
  auto deviation = [&](const TrainRun& run) {
    double d = 0;
    for (size_t i = 0; i < plain.params[0].size(); ++i)
      d = std::max(d, (run.params[0][i] - plain.params[0][i]).abs().max().item<double>());
    return d;
  };
  // Rounding only (Gram-Schmidt on nearly dependent columns loses a few digits), where rank 1
  // drops real directions of the gradient.
  EXPECT_LT(deviation(psgd), 1e-3);
  EXPECT_GT(deviation(rank1), 10 * deviation(psgd)) << "rank 4 is not closer to the exact average than rank 1";
  // fc2 (64 x 64) goes as P and Q of 64 x 4 each: an eighth of its bytes.
  EXPECT_LT(static_cast<double>(psgd.stats[0].bytes_on_wire), 0.6 * static_cast<double>(psgd.stats[0].bytes_allreduced));
}

TEST(CommHookPowerSGD, RankOneKeepsRanksEqualAndTheSharedMemoryPathAgrees) {
  cohort::PowerSGDOptions o;
  o.rank = 1;
  o.start_step = 2;
  const auto gloo = train(2, 6, 4, 64, [o] { return cohort::powersgd_hook(o); });
  const auto shm = train(2, 6, 4, 64, [o] { return cohort::powersgd_hook(o); }, /*same_machine=*/true);
  expect_ranks_bitwise_equal(gloo);
  expect_ranks_bitwise_equal(shm);
  expect_close(shm.params[0], gloo.params[0], 1e-4, 1e-5);
}

// A hook that returns one element too few.
class ShortHook : public cohort::CommHook {
 public:
  std::string describe() const override { return "short"; }
  at::Tensor run(cohort::GradBucket& bucket, cohort::HookComm& comm) override {
    comm.allreduce_sum(bucket.buffer);
    return bucket.buffer.narrow(0, 0, bucket.buffer.numel() - 1);
  }
};

std::vector<std::string> errors_of(int world, const std::function<std::shared_ptr<cohort::CommHook>(int rank)>& hook,
                                   bool backward = true) {
  auto errors = run_ranks_collect(world, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    cohort::DDPOptions opt;
    opt.comm_hook = hook(ctx->rank());
    auto model = cohort::DistributedDataParallel(net, ctx, opt);
    if (!backward) return;
    auto b = make_batches(1, 4)[0];
    torch::nll_loss(model->forward(b.x), b.y).backward();
  });
  std::vector<std::string> out;
  for (auto& e : errors) {
    try {
      if (e) std::rethrow_exception(e);
      out.push_back("");
    } catch (const cohort::ConfigError& c) {
      out.push_back(c.what());
    } catch (const std::exception& x) {
      out.push_back(std::string("not a ConfigError: ") + x.what());
    }
  }
  return out;
}

TEST(CommHookErrors, AResultOfTheWrongSizeNamesTheRankAndTheBucket) {
  const auto errors = errors_of(2, [](int) { return std::make_shared<ShortHook>(); });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].rfind("rank " + std::to_string(r) + ": DDP comm hook 'short' returned a [", 0), 0u) << errors[r];
    EXPECT_NE(errors[r].find("for bucket 0 (fc3.bias"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("it must return the bucket's average"), std::string::npos) << errors[r];
  }
}

TEST(CommHookErrors, PowerSGDRankZeroOrLargerThanAMatrixIsRefusedAtConstruction) {
  cohort::PowerSGDOptions zero;
  zero.rank = 0;
  auto errors = errors_of(2, [&](int) { return cohort::powersgd_hook(zero); }, false);
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find("PowerSGD rank must be at least 1 (got 0)"), std::string::npos) << errors[r];
  cohort::PowerSGDOptions big;
  big.rank = 5;  // fc3.weight, the bucket's first matrix, is 4 x 16
  errors = errors_of(2, [&](int) { return cohort::powersgd_hook(big); }, false);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].rfind("rank " + std::to_string(r) + ": PowerSGD rank 5 is larger than parameter 'fc3.weight'", 0), 0u)
        << errors[r];
    EXPECT_NE(errors[r].find("(bucket 0, a 4 x 16 matrix) allows: at most 4"), std::string::npos) << errors[r];
  }
}

TEST(CommHookErrors, RanksThatDisagreeOnTheHookFailTogetherAtConstruction) {
  const auto errors = errors_of(
      2, [](int rank) { return rank == 0 ? cohort::fp16_compress_hook() : nullptr; }, false);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("DistributedDataParallel: the settings differ across ranks (rank 1 differ from rank 0): "
                             "rank 1 has comm hook 'none' where rank 0 has comm hook 'fp16'"),
              std::string::npos)
        << errors[r];
  }
}

TEST(CommHookErrors, CompressingIntegerGradientsAndUnknownNamesAreRefused) {
  cohort::GradBucket b;
  b.index = 3;
  b.buffer = torch::zeros({4}, torch::kLong);
  b.gradients = {b.buffer};
  b.names = {"counts"};
  try {
    cohort::fp16_compress_hook()->check({b}, 1);
    FAIL() << "no error";
  } catch (const cohort::ConfigError& e) {
    EXPECT_STREQ(e.what(), "rank 1: DDP comm hook 'fp16' cannot compress bucket 3 (counts, ...): its gradients are "
                           "Long, not floating point");
  }
  EXPECT_THROW(cohort::powersgd_hook()->check({b}, 0), cohort::ConfigError);
  EXPECT_THROW(cohort::comm_hook_by_name("zstd"), std::invalid_argument);
  EXPECT_EQ(cohort::comm_hook_by_name("none"), nullptr);
  EXPECT_EQ(cohort::comm_hook_by_name("bf16")->describe(), "bf16");
}

}  // namespace
