// The CUDA paths, in a world of one over NCCL (one GPU: NCCL refuses two ranks on one device):
// DDP, each sharding level, checkpoints of CUDA parameters, optimizer state and CUDA RNG, and the
// monitor's CUDA memory. Compiled in every build; run where a GPU is (scripts/gpu-check.sh), and
// skipped with the reason elsewhere — never silently.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "cohort/cohort.h"
#include "support/ddp_fixtures.h"
#include "support/optim_fixtures.h"
#include "optim/aten_fused_adam.h"
#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"
#include "runtime/torch_compat_internal.h"

namespace {

using namespace cohort::testing;

std::string no_cuda_reason() {
#ifdef USE_C10D_NCCL
  return "this libtorch has CUDA and NCCL, but this machine has no CUDA device: run scripts/gpu-check.sh on one";
#else
  return "this libtorch was built without CUDA and NCCL: the torch 2.x build (scripts/build-torch2.sh) compiles "
         "these tests, and scripts/gpu-check.sh runs them on a GPU";
#endif
}

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << no_cuda_reason()

const torch::Device kCuda(torch::kCUDA, 0);

std::map<std::string, torch::Tensor> named_cpu(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().cpu().clone();
  return out;
}

TEST(Cuda, DdpOverNcclInAWorldOfOneIsBitwisePlainTraining) {
  SKIP_WITHOUT_CUDA();
  const auto init = initial_parameters(5);
  const auto batches = make_batches(6, 16);
  SmallNet plain;
  load_parameters(*plain, init);
  plain->to(kCuda);
  torch::optim::SGD plain_opt(plain->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (const auto& b : batches) {
    plain_opt.zero_grad();
    torch::nll_loss(plain->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
    plain_opt.step();
  }
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    EXPECT_EQ(ctx->device(torch::kCUDA), kCuda);
    EXPECT_EQ(ctx->group(kCuda)->getBackendName(), "nccl");
    SmallNet net;
    load_parameters(*net, init);
    net->to(kCuda);
    cohort::DDPOptions ddp_options;
    ddp_options.bucket_cap_mb = 0.001;  // several buckets
    auto model = cohort::DistributedDataParallel(net, ctx, ddp_options);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (const auto& b : batches) {
      opt.zero_grad();
      torch::nll_loss(model->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
      opt.step();
    }
    // Alone, DDP buckets the gradients but skips the collective (the bucket is already the average).
    EXPECT_GT(model->stats().buckets_launched_in_backward + model->stats().buckets_launched_at_end, 1);
    // The NCCL group itself reduces on the GPU.
    std::vector<torch::Tensor> one{torch::full({4}, 3.0, torch::TensorOptions().device(kCuda))};
    ctx->group(kCuda)->allreduce(one)->wait();
    EXPECT_TRUE(torch::equal(one[0].cpu(), torch::full({4}, 3.0)));
    const auto a = named_cpu(*plain), d = named_cpu(*net);
    for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, d.at(name))) << name;
  });
}

class CudaSharded : public ::testing::TestWithParam<cohort::ShardingLevel> {};

TEST_P(CudaSharded, EachLevelTrainsLikeDdpOnTheGpu) {
  SKIP_WITHOUT_CUDA();
  const auto init = mlp_init(11);
  const auto cuda_mlp = [&] {
    auto m = make_mlp(init);  // loads the values into CPU parameters, then moves them
    m->to(kCuda);
    return m;
  };
  const auto batches = make_batches(5, 8, 3);
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    auto ddp_net = cuda_mlp();
    auto ddp = cohort::DistributedDataParallel(ddp_net, ctx);
    auto opt1 = make_optimizer(Opt::adam, ddp->parameters());
    cohort::ShardedOptions options;
    options.level = GetParam();
    options.unit_cap_mb = 0.0005;
    auto model = cohort::ShardedDataParallel(cuda_mlp(), ctx, options);
    auto opt2 = make_optimizer(Opt::adam, model->parameters());
    for (const auto& b : batches) {
      opt1->zero_grad();
      torch::nll_loss(ddp->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
      opt1->step();
      opt2->zero_grad();
      torch::nll_loss(model->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
      opt2->step();
    }
    const auto full = model->full_state(nullptr).model;
    const auto expected = named_cpu(*ddp);  // "module."-prefixed, as full_state names them
    ASSERT_EQ(full.size(), expected.size());
    for (const auto& [name, t] : full) {
      ASSERT_TRUE(expected.count(name)) << name;
      EXPECT_TRUE(torch::allclose(t.cpu(), expected.at(name), 1e-5, 1e-6)) << name;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Levels, CudaSharded,
                         ::testing::Values(cohort::ShardingLevel::optimizer_state, cohort::ShardingLevel::gradients,
                                           cohort::ShardingLevel::parameters),
                         [](const auto& info) { return "level" + std::to_string(static_cast<int>(info.param)); });

TEST(Cuda, CheckpointRestoresCudaParametersOptimizerStateAndRngBitwise) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = (std::filesystem::temp_directory_path() / "cohort-cuda-ckpt").string();
  std::filesystem::remove_all(dir);
  const auto batches = make_batches(4, 16);
  std::map<std::string, torch::Tensor> saved_params;
  torch::Tensor draw_after_save;
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    net->to(kCuda);
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
    for (const auto& b : batches) {
      opt.zero_grad();
      torch::nll_loss(model->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
      opt.step();
    }
    cohort::Checkpointer checkpoints(dir, ctx, {.async = false});
    checkpoints.set_step(4);
    checkpoints.save({&*model, &opt, nullptr});
    saved_params = named_cpu(*net);
    draw_after_save = torch::randn({8}, torch::TensorOptions().device(kCuda)).cpu();
    // One more step: what restoring must undo, Adam's moments included.
    opt.zero_grad();
    torch::nll_loss(model->forward(batches[0].x.to(kCuda)), batches[0].y.to(kCuda)).backward();
    opt.step();
  });
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    torch::manual_seed(999);  // other initial values, another RNG position
    SmallNet net;
    net->to(kCuda);
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
    cohort::Checkpointer checkpoints(dir, ctx);
    const auto info = checkpoints.restore_latest({&*model, &opt, nullptr});
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->step, 4);
    for (const auto& p : net->parameters()) EXPECT_TRUE(p.is_cuda());
    const auto restored = named_cpu(*net);
    for (const auto& [name, t] : saved_params) EXPECT_TRUE(torch::equal(t, restored.at(name))) << name;
    EXPECT_TRUE(torch::equal(torch::randn({8}, torch::TensorOptions().device(kCuda)).cpu(), draw_after_save))
        << "the CUDA generator continues where it was saved";
    // The optimizer state is there and on the GPU: a step from it matches a step of the saved run.
    for (const auto& p : net->parameters()) {
      auto it = opt.state().find(cohort::optimizer_state_key<std::decay_t<decltype(opt.state())>>(p));
      ASSERT_NE(it, opt.state().end());
      const auto& st = static_cast<const torch::optim::AdamParamState&>(*it->second);
      EXPECT_EQ(st.step(), 4);
      EXPECT_TRUE(st.exp_avg().is_cuda());
    }
  });
  std::filesystem::remove_all(dir);
}

TEST(Cuda, MonitorReportsCudaMemory) {
  SKIP_WITHOUT_CUDA();
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    cohort::Monitor mon(cohort::MonitorOptions{});
    cohort::ScopedMonitor bind(mon);
    SmallNet net;
    net->to(kCuda);
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
    const auto b = make_batches(1, 16)[0];
    opt.zero_grad();
    torch::nll_loss(model->forward(b.x.to(kCuda)), b.y.to(kCuda)).backward();
    opt.step();
    cohort::monitor().step({{"loss", 1.0}});
    const auto rec = cohort::monitor().last();
    ASSERT_TRUE(rec.has_value());
    ASSERT_TRUE(rec->cuda_bytes.has_value()) << "a libtorch with CUDA reports the caching allocator's bytes";
    EXPECT_GT(*rec->cuda_bytes, 0);
  });
}

// FusedAdamW on CUDA parameters: ATen's multi-tensor kernel on libtorch 2.x (aten_fused_adam.h;
// libtorch's own step on 1.13), the same parameters and state as libtorch's AdamW after 10 steps
// to float rounding, with decoupled weight decay and amsgrad.
TEST(Cuda, FusedAdamWOnCudaMatchesLibtorchsAdamW) {
  SKIP_WITHOUT_CUDA();
  std::vector<torch::Tensor> a, b;
  for (const auto& p : make_params()) {
    a.push_back(p.detach().to(kCuda).set_requires_grad(true));
    b.push_back(p.detach().to(kCuda).set_requires_grad(true));
  }
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true);
  torch::optim::AdamW ref(a, options);
  cohort::FusedAdamW fused(b, options);
  for (int s = 0; s < 10; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    for (auto& p : a) p.mutable_grad() = p.grad().to(kCuda);
    for (auto& p : b) p.mutable_grad() = p.grad().to(kCuda);
    if (s == 0) {
      EXPECT_EQ((cohort::detail::aten_fusable_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
                    fused.param_groups(), fused.state())),
                cohort::detail::aten_fused_adam_available());
    }
    ref.step();
    fused.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(relative_diff(b[i].detach(), a[i].detach()), 1e-6) << "parameter " << i;
    const auto key = cohort::optimizer_state_key<std::decay_t<decltype(fused.state())>>(b[i]);
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*fused.state().at(key));
    EXPECT_EQ(s.step(), 10);
    EXPECT_TRUE(s.exp_avg().is_cuda() && s.max_exp_avg_sq().is_cuda());
  }
}

}  // namespace
