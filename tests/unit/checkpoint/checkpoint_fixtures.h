// Shared by the Checkpointer's tests (checkpoint_test.cpp, checkpoint_policy_test.cpp): fresh
// directories removed at the end, optimizers, the state a resumed run must reproduce bitwise, and a
// data-parallel trainer. Ranks as threads (support/thread_ranks.h).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/format/training_state.h"
#include "cohort/distributed_data_parallel.h"
#include "support/ddp_fixtures.h"

namespace checkpoint_test {

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

// Every directory fresh_dir made, removed when the test program ends: some hold a FIFO named
// manifest.json (CheckpointCorruption), which blocks whatever reads /tmp later (a grep -r did).
inline std::vector<fs::path>& made_dirs() {
  static std::vector<fs::path> dirs;
  return dirs;
}
class RemoveMadeDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    for (const auto& d : made_dirs()) fs::remove_all(d, ignored);
  }
};
inline ::testing::Environment* const kRemoveMadeDirs = ::testing::AddGlobalTestEnvironment(new RemoveMadeDirs);

inline std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cohort_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  made_dirs().push_back(p);
  return p.string();
}

inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params) {
  if (kind == "sgd") return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  if (kind == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
}

// What a resumed run must reproduce bit for bit: parameters and optimizer state tensors.
inline std::vector<torch::Tensor> full_state(torch::nn::Module& module, torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters()) out.push_back(p.detach().clone());
  std::string description;
  for (auto& [name, t] : ckpt::optimizer_tensors(opt, module, &description, 0)) out.push_back(t.clone());
  return out;
}

inline void expect_bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " differs";
}

// A data-parallel SmallNet with its optimizer; rank r trains on its slice of each global batch.
struct Trainer {
  Trainer(std::shared_ptr<Context> ctx, const std::string& kind, const std::vector<torch::Tensor>& init, int hidden = 16)
      : rank(ctx->rank()), world(ctx->world_size()), model(make_model(ctx, init, hidden)),
        opt(make_optimizer(kind, model->parameters())) {}
  static DistributedDataParallel<SmallNet> make_model(std::shared_ptr<Context> ctx, const std::vector<torch::Tensor>& init,
                                                      int hidden) {
    SmallNet net(hidden);
    if (!init.empty()) load_parameters(*net, init);
    return DistributedDataParallel(net, ctx);
  }
  void step(const Batch& b) {
    const auto rows = b.x.size(0) / world;
    opt->zero_grad();
    torch::nll_loss(model->forward(b.x.narrow(0, rank * rows, rows)), b.y.narrow(0, rank * rows, rows)).backward();
    opt->step();
  }
  TrainingState state() { return {&*model, opt.get(), nullptr}; }
  int rank, world;
  DistributedDataParallel<SmallNet> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
};

}  // namespace checkpoint_test
