// DDP against its yardsticks: W ranks with batch B give the parameters of one process with
// batch W×B, with one bucket, with one bucket per parameter, and in reference mode.
#include <gtest/gtest.h>

#include <mutex>

#include "cohort/checksum.h"
#include "cohort/distributed_data_parallel.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "runtime/context_internals.h"

namespace {

using namespace cohort::testing;

struct Case {
  int world;
  double bucket_cap_mb;
  bool reference;
  bool shm = false;  // ranks on one machine: buckets go through the shared-memory allreduce
};

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "W" + std::to_string(c.world) + (c.reference ? "_reference" : c.bucket_cap_mb < 1e-3 ? "_bucket_per_param" : "_default_buckets") +
         (c.shm ? "_shm" : "");
}

class DdpEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(DdpEquivalence, SameParametersAsOneProcessOnTheWholeBatch) {
  const Case c = GetParam();
  const int64_t B = 6;
  const auto init = initial_parameters(42);
  const auto batches = make_batches(5, B * c.world);
  const auto expected = train_single(init, batches);

  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> results(c.world);
  std::vector<std::string> checksums(c.world);
  std::vector<cohort::DDPStats> stats(c.world);
  run_ranks(c.world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    SmallNet net;  // random on ranks > 0: the construction broadcast must replace it
    if (r == 0) load_parameters(*net, init);
    cohort::DDPOptions opt;
    opt.bucket_cap_mb = c.bucket_cap_mb;
    opt.reference_mode = c.reference;
    auto model = cohort::DistributedDataParallel(net, ctx, opt);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (const auto& b : batches) {
      sgd.zero_grad();
      auto x = b.x.narrow(0, r * B, B), y = b.y.narrow(0, r * B, B);
      torch::nll_loss(model->forward(x), y).backward();
      sgd.step();
    }
    std::lock_guard<std::mutex> lock(mu);
    results[r] = snapshot(*model->module());
    checksums[r] = cohort::parameters_checksum(*model);
    stats[r] = model->stats();
    EXPECT_EQ(cohort::detail::ContextInternals::shm_allreduce(*ctx) != nullptr, c.shm);
  }, {.same_machine = c.shm});
  expect_close(results[0], expected);
  for (int r = 1; r < c.world; ++r) EXPECT_EQ(checksums[r], checksums[0]) << "rank " << r << " diverged";
  EXPECT_EQ(stats[0].sync_iterations, 5);
  if (!c.reference) {
    EXPECT_EQ(stats[0].num_buckets, c.bucket_cap_mb < 1e-3 ? 6 : 1);  // 3 weights + 3 biases
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, DdpEquivalence,
                         ::testing::Values(Case{1, 25, false}, Case{2, 25, false}, Case{4, 25, false},
                                           Case{1, 1e-6, false}, Case{2, 1e-6, false}, Case{4, 1e-6, false},
                                           Case{2, 25, true}, Case{4, 25, true}, Case{2, 25, false, true},
                                           Case{3, 25, false, true}, Case{4, 1e-6, false, true}),
                         name_of);

// The fast path against the reference mode, directly, on the same ranks and data.
TEST(DdpEquivalence, BucketedEqualsReferenceMode) {
  const int world = 3;
  const int64_t B = 5;
  const auto init = initial_parameters(7);
  const auto batches = make_batches(4, B * world, 9);
  std::vector<std::vector<torch::Tensor>> fast(world), reference(world);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    for (bool ref : {false, true}) {
      SmallNet net;
      load_parameters(*net, init);
      cohort::DDPOptions opt;
      opt.bucket_cap_mb = 0.0005;  // a few buckets
      opt.first_bucket_cap_mb = 0.0001;
      opt.reference_mode = ref;
      auto model = cohort::DistributedDataParallel(net, ctx, opt);
      torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      for (const auto& b : batches) {
        sgd.zero_grad();
        torch::nll_loss(model->forward(b.x.narrow(0, r * B, B)), b.y.narrow(0, r * B, B)).backward();
        sgd.step();
      }
      (ref ? reference : fast)[r] = snapshot(*model->module());
    }
  });
  for (int r = 0; r < world; ++r) expect_close(fast[r], reference[r]);
}

}  // namespace
