// Shared by the sharded data-parallel tests: a Sequential MLP whose units do not divide evenly by
// 2, 3 or 4, the same model under DDP as the yardstick, and a trainer for either.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "cohort/distributed_data_parallel.h"
#include "cohort/fused_adam.h"
#include "cohort/sharded_data_parallel.h"
#include "support/ddp_fixtures.h"

namespace cohort::testing {

// 8 -> 15 -> 15 -> 4: units of 135, 240 and 64 elements (135 is odd, 64 % 3 != 0; 439 in all).
inline torch::nn::Sequential new_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(8, 15), torch::nn::ReLU(), torch::nn::Linear(15, 15),
                               torch::nn::ReLU(), torch::nn::Linear(15, 4), torch::nn::LogSoftmax(1));
}

/// Initial values for `seed` (call outside rank threads: the global generator is shared).
inline std::vector<torch::Tensor> mlp_init(uint64_t seed) {
  torch::manual_seed(seed);
  return snapshot(*new_mlp());
}

/// A fresh MLP holding `init`.
inline torch::nn::Sequential make_mlp(const std::vector<torch::Tensor>& init) {
  auto m = new_mlp();
  load_parameters(*m, init);
  return m;
}

enum class Opt { sgd, adam, adamw, fused_adam, fused_adamw };

inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(Opt opt, std::vector<torch::Tensor> params) {
  switch (opt) {
    case Opt::sgd: return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    case Opt::adam: return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
    case Opt::fused_adam: return std::make_unique<cohort::FusedAdam>(params, torch::optim::AdamOptions(0.01).weight_decay(0.05));
    case Opt::fused_adamw:
      return std::make_unique<cohort::FusedAdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
    default: return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  }
}

using StateMap = std::map<std::string, torch::Tensor>;

inline StateMap to_map(const NamedTensorList& list) {
  StateMap out;
  for (const auto& [name, t] : list) out[name] = t;
  return out;
}

/// Parameters of a DDP-wrapped Sequential after training, named as an unsharded checkpoint names them.
template <typename M>
StateMap named_parameters(M& ddp) {
  StateMap out;
  for (const auto& p : ddp->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

inline void expect_same_state(const StateMap& got, const StateMap& want, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << "missing " << name;
    ASSERT_EQ(it->second.sizes(), w.sizes()) << name;
    EXPECT_TRUE(torch::allclose(it->second.to(torch::kDouble), w.to(torch::kDouble), rtol, atol))
        << name << " differs by up to " << (it->second.to(torch::kDouble) - w.to(torch::kDouble)).abs().max().item<double>();
  }
}

inline void expect_bitwise_equal(const StateMap& got, const StateMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << "missing " << name;
    EXPECT_TRUE(it->second.sizes() == w.sizes() && it->second.scalar_type() == w.scalar_type() && torch::equal(it->second, w))
        << name << " is not bitwise equal";
  }
}

}  // namespace cohort::testing
