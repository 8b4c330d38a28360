// DDP behaviour: overlap of communication with backward, no_sync accumulation, parameters
// without gradients, buffer broadcast, the in-sync check, and mismatched models.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"

namespace {

using namespace cohort::testing;

TEST(DdpOverlap, FirstBucketIsLaunchedBeforeBackwardReachesTheFirstLayer) {
  // One bucket per parameter. fc1's weight gradient is the last one backward computes; a hook on
  // it reads how many buckets were already launched at that moment.
  std::atomic<int64_t> launched_when_fc1_grad_ready{-1};
  std::vector<cohort::DDPStats> stats(2);
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    cohort::DDPOptions opt;
    opt.bucket_cap_mb = 1e-6;
    auto model = cohort::DistributedDataParallel(net, ctx, opt);
    cohort::DistributedDataParallelImpl<SmallNet>* impl = model.get();
    if (ctx->rank() == 0) {
      net->fc1->weight.register_hook([&, impl](torch::Tensor g) {
        launched_when_fc1_grad_ready = impl->stats().buckets_launched_in_backward;
        return g;
      });
    }
    auto b = make_batches(1, 4)[0];
    torch::nll_loss(model->forward(b.x), b.y).backward();
    stats[ctx->rank()] = model->stats();
  });
  EXPECT_GE(launched_when_fc1_grad_ready.load(), 1) << "no allreduce had started while backward was still running";
  EXPECT_EQ(stats[0].buckets_launched_in_backward, stats[0].num_buckets);
  EXPECT_EQ(stats[0].buckets_launched_at_end, 0);
}

TEST(DdpBuckets, ABucketClosesOnceItReachesItsCapAsPyTorchsDo) {
  // fc2's weight (16 KiB) takes the first bucket past its 10 KiB cap: it ends that bucket, as in
  // PyTorch's compute_bucket_assignment_by_size, instead of opening the next one — where it would
  // wait for fc1, the end of backward, and its allreduce would overlap nothing.
  std::vector<std::vector<std::string>> layout;
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    cohort::DDPOptions opt;
    opt.first_bucket_cap_mb = 0.01;
    opt.bucket_cap_mb = 1;
    auto model = cohort::DistributedDataParallel(SmallNet(64), ctx, opt);
    if (ctx->rank() == 0) layout = model->bucket_layout();
  });
  const std::vector<std::vector<std::string>> expected{{"fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight"},
                                                       {"fc1.bias", "fc1.weight"}};
  EXPECT_EQ(layout, expected);
}

TEST(DdpNoSync, AccumulatedMicroBatchesEqualOneStepOnTheConcatenatedBatch) {
  const int world = 2, micro = 3;
  const int64_t B = 4;
  const auto init = initial_parameters(3);
  // Two global steps of world × micro × B rows; in each, rank r's micro-batch m is rows
  // (r·micro + m)·B. The first step also makes the gradients aliases of the buckets, so the second
  // accumulates straight into bucket memory under no_sync.
  const auto batches = make_batches(2, world * micro * B, 5);
  const auto expected = train_single(init, batches);
  std::vector<std::vector<torch::Tensor>> results(world);
  std::vector<int64_t> bytes_during_no_sync(world, -1);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    SmallNet net;
    load_parameters(*net, init);
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (const auto& b : batches) {
      sgd.zero_grad();
      auto micro_loss = [&](int m) {
        const int64_t row = (r * micro + m) * B;
        return torch::nll_loss(model->forward(b.x.narrow(0, row, B)), b.y.narrow(0, row, B)) / micro;
      };
      const auto before = model->stats().bytes_allreduced;
      {
        auto no_sync = model->no_sync();
        for (int m = 0; m < micro - 1; ++m) micro_loss(m).backward();
      }
      bytes_during_no_sync[r] = std::max(bytes_during_no_sync[r], model->stats().bytes_allreduced - before);
      micro_loss(micro - 1).backward();
      sgd.step();
    }
    results[r] = snapshot(*model->module());
  });
  EXPECT_EQ(bytes_during_no_sync[0], 0) << "no_sync backward passes communicated";
  expect_close(results[0], expected);
  expect_close(results[1], expected);
}

// fc_extra is used by rank 0 only; fc_never by no rank.
struct BranchyNetImpl : torch::nn::Module {
  BranchyNetImpl()
      : fc(register_module("fc", torch::nn::Linear(8, 4))),
        fc_extra(register_module("fc_extra", torch::nn::Linear(8, 4))),
        fc_never(register_module("fc_never", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x, bool extra) {
    auto y = fc->forward(x);
    if (extra) y = y + fc_extra->forward(x);
    return torch::log_softmax(y, 1);
  }
  torch::nn::Linear fc, fc_extra, fc_never;
};
TORCH_MODULE(BranchyNet);

TEST(DdpUnusedParameters, NoHangAndTheSameGradientsAsReferenceMode) {
  torch::manual_seed(1);
  const auto init = snapshot(*BranchyNet());  // made here: threads drawing from the global RNG would race
  for (double cap : {25.0, 1e-6}) {
    std::vector<std::vector<torch::Tensor>> grads(2), ref_grads(2);
    std::vector<char> never_has_grad(2, true);  // not vector<bool>: its bits share words, and the ranks write at once
    run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
      const int r = ctx->rank();
      for (bool reference : {false, true}) {
        BranchyNet net;
        load_parameters(*net, init);
        cohort::DDPOptions opt;
        opt.bucket_cap_mb = cap;
        opt.reference_mode = reference;
        auto model = cohort::DistributedDataParallel(net, ctx, opt);
        auto b = make_batches(2, 4, 11)[r];
        for (int it = 0; it < 2; ++it) {  // twice: the second iteration must not be corrupted by the first
          for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
          torch::nll_loss(model->forward(b.x, r == 0), b.y).backward();
        }
        std::vector<torch::Tensor> g;
        for (auto* lin : {&net->fc, &net->fc_extra}) g.push_back((*lin)->weight.grad().clone());
        (reference ? ref_grads : grads)[r] = g;
        if (!reference) never_has_grad[r] = !net->fc_never->weight.grad().defined();
      }
    });
    for (int r = 0; r < 2; ++r) {
      expect_close(grads[r], ref_grads[r]);
      EXPECT_TRUE(never_has_grad[r]) << "a parameter no rank used got a gradient (cap " << cap << ")";
    }
    // fc_extra's gradient came from rank 0 alone, averaged over 2 ranks, and reached rank 1 too.
    expect_close({grads[1][1]}, {grads[0][1]});
  }
}

struct NormNetImpl : torch::nn::Module {
  NormNetImpl()
      : fc(register_module("fc", torch::nn::Linear(8, 4))),
        bn(register_module("bn", torch::nn::BatchNorm1d(torch::nn::BatchNormOptions(4).momentum(0.0)))) {}
  torch::Tensor forward(torch::Tensor x) { return bn->forward(fc->forward(x)); }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d bn;
};
TORCH_MODULE(NormNet);

TEST(DdpBuffers, RankZerosBuffersAreBroadcastAtConstructionAndBeforeForward) {
  std::vector<torch::Tensor> after_ctor(2), after_forward(2);
  run_ranks(2, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    NormNet net;
    {
      torch::NoGradGuard g;
      net->bn->running_mean.fill_(r + 1.0);
    }
    auto model = cohort::DistributedDataParallel(net, ctx);
    after_ctor[r] = net->bn->running_mean.clone();
    {
      torch::NoGradGuard g;
      net->bn->running_mean.fill_(10.0 * (r + 1));  // drift; momentum 0 keeps forward from changing it
    }
    model->forward(torch::randn({4, 8}));
    after_forward[r] = net->bn->running_mean.clone();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(after_ctor[r].equal(torch::full({4}, 1.0))) << "rank " << r;
    EXPECT_TRUE(after_forward[r].equal(torch::full({4}, 10.0))) << "rank " << r;
  }
}

TEST(DdpInSyncCheck, NamesTheRankWhoseParametersDiffer) {
  auto errors = run_ranks_collect(3, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    model->assert_in_sync();  // right after construction: equal
    if (ctx->rank() == 2) {
      torch::NoGradGuard g;
      net->fc2->bias.add_(1e-3);
    }
    model->assert_in_sync();
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not notice";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const cohort::Error& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(r) +
                                           ": DistributedDataParallel parameters differ across ranks: rank(s) 2 "
                                           "differ from rank 0");
    }
  }
}

TEST(DdpModelCheck, MismatchedModelsAreAClearErrorOnEveryRank) {
  auto errors = run_ranks_collect(3, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net(ctx->rank() == 1 ? 17 : 16);
    auto model = cohort::DistributedDataParallel(net, ctx);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " went on with a mismatched model";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const cohort::ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("rank " + std::to_string(r) + ": DistributedDataParallel: the model differs across ranks", 0), 0u) << msg;
      EXPECT_NE(msg.find("rank 1 has parameter 'fc1.weight' [17, 8] Float where rank 0 has parameter 'fc1.weight' [16, 8] Float"),
                std::string::npos)
          << msg;
    }
  }
}

TEST(DdpModelCheck, DifferentNumberOfParametersIsAnErrorToo) {
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<cohort::Context> ctx) {
    if (ctx->rank() == 0) {
      SmallNet net;
      auto model = cohort::DistributedDataParallel(net, ctx);
    } else {
      NormNet net;
      auto model = cohort::DistributedDataParallel(net, ctx);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(errors[r]) << "rank " << r;
}

}  // namespace
