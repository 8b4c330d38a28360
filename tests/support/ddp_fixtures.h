// Models and data shared by the DDP tests: a small MLP, batches fixed in advance, and a
// single-process trainer that is the yardstick for data-parallel training.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace cohort::testing {

struct SmallNetImpl : torch::nn::Module {
  explicit SmallNetImpl(int hidden = 16)
      : fc1(register_module("fc1", torch::nn::Linear(8, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return torch::log_softmax(fc3->forward(x), 1);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(SmallNet);

struct Batch {
  torch::Tensor x, y;
};

/// `steps` global batches of `rows` samples, the same on every call.
inline std::vector<Batch> make_batches(int steps, int64_t rows, uint64_t seed = 1) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<Batch> out;
  for (int s = 0; s < steps; ++s) {
    out.push_back({torch::randn({rows, 8}, gen), torch::randint(0, 4, {rows}, gen, torch::kLong)});
  }
  return out;
}

/// Parameters of a freshly initialised SmallNet for `seed`, to copy into rank 0's model.
inline std::vector<torch::Tensor> initial_parameters(uint64_t seed, int hidden = 16) {
  torch::manual_seed(seed);
  SmallNet net(hidden);
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

inline void load_parameters(torch::nn::Module& net, const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  auto params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
}

inline std::vector<torch::Tensor> snapshot(torch::nn::Module& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

/// One process, whole global batches: what W ranks with W×B split batches must reproduce.
inline std::vector<torch::Tensor> train_single(const std::vector<torch::Tensor>& init, const std::vector<Batch>& batches) {
  SmallNet net;
  load_parameters(*net, init);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (const auto& b : batches) {
    opt.zero_grad();
    torch::nll_loss(net->forward(b.x), b.y).backward();
    opt.step();
  }
  return snapshot(*net);
}

inline void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double rtol = 1e-5,
                         double atol = 1e-6) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], rtol, atol))
        << "tensor " << i << " differs by up to " << (a[i] - b[i]).abs().max().item<double>();
  }
}

}  // namespace cohort::testing
