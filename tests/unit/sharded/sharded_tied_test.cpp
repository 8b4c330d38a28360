// A model whose output head reads its token embedding's weight (tied, as GPT-2's) under level 3,
// with that unit kept gathered through the forward (ShardedOptions::keep_gathered): trains like
// DDP, and frees the kept unit after its backward. And shard_masks, for per-parameter choices such
// as weight decay on matrices only.
#include <gtest/gtest.h>

#include "cohort/error.h"
#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"

namespace {

using namespace cohort::testing;
using cohort::ShardingLevel;

constexpr int64_t kVocab = 13, kDim = 6, kSeq = 5;

struct TokensImpl : torch::nn::Module {
  TokensImpl() : wte(register_module("wte", torch::nn::Embedding(kVocab, kDim))) {}
  torch::Tensor forward(const torch::Tensor& idx) { return wte->forward(idx); }
  torch::nn::Embedding wte;
};
TORCH_MODULE(Tokens);

struct TiedHeadImpl : torch::nn::Module {
  explicit TiedHeadImpl(Tokens t) : tokens(std::move(t)), ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(ln->forward(x), tokens->wte->weight); }
  Tokens tokens;  // not registered: its weight is the "0" child's
  torch::nn::LayerNorm ln;
};
TORCH_MODULE(TiedHead);

torch::nn::Sequential new_tied() {
  Tokens tokens;
  return torch::nn::Sequential(tokens, torch::nn::Linear(kDim, kDim), torch::nn::Tanh(), TiedHead(tokens));
}

/// Initial values for `seed` (outside rank threads: the global generator is shared).
std::vector<torch::Tensor> tied_init(uint64_t seed) {
  torch::manual_seed(seed);
  return snapshot(*new_tied());
}

torch::nn::Sequential make_tied(const std::vector<torch::Tensor>& init) {
  auto m = new_tied();
  load_parameters(*m, init);
  return m;
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}));
}

TEST(ShardedTied, Level3KeepingTheEmbeddingGatheredTrainsLikeDdp) {
  const int world = 3, steps = 4, B = 2;
  torch::manual_seed(5);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(torch::randint(kVocab, {B * world, kSeq}, torch::kLong));
    ys.push_back(torch::randint(kVocab, {B * world, kSeq}, torch::kLong));
  }
  std::vector<StateMap> ddp_state(world), sharded_state(world);
  std::vector<cohort::ShardedStats> stats(world);
  const auto init = tied_init(9);
  run_ranks(world, [&](std::shared_ptr<cohort::Context> ctx) {
    const int r = ctx->rank();
    auto ddp = cohort::DistributedDataParallel(make_tied(init), ctx);
    torch::optim::Adam opt1(ddp->parameters(), torch::optim::AdamOptions(0.05));
    cohort::ShardedOptions o;
    o.level = ShardingLevel::parameters;
    o.keep_gathered = {"0"};
    auto model = cohort::ShardedDataParallel(make_tied(init), ctx, o);
    torch::optim::Adam opt2(model->parameters(), torch::optim::AdamOptions(0.05));
    for (int s = 0; s < steps; ++s) {
      auto x = xs[s].narrow(0, r * B, B), y = ys[s].narrow(0, r * B, B);
      opt1.zero_grad();
      loss_of(ddp->forward(x), y).backward();
      opt1.step();
      opt2.zero_grad();
      loss_of(model->forward(x), y).backward();
      opt2.step();
    }
    {  // without autograd (evaluation) the kept unit is there for the head, and freed afterwards
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(torch::allclose(model->forward(xs[0]), ddp->forward(xs[0]), 1e-4, 1e-5));
    }
    stats[r] = model->stats();
    ddp_state[r] = named_parameters(ddp);
    sharded_state[r] = to_map(model->full_state(nullptr).model);
  });
  for (int r = 0; r < world; ++r) {
    expect_same_state(sharded_state[r], ddp_state[0], 1e-4, 1e-5);
    // The tied weight counts once: one embedding, the Linear, the LayerNorm.
    EXPECT_EQ(sharded_state[r].size(), 5u);
    EXPECT_LE(stats[r].max_units_gathered, 3) << "the kept unit plus the current and the prefetched one";
  }
}

TEST(ShardedTied, KeepGatheredIsCheckedAtConstruction) {
  const auto init = tied_init(1);
  for (auto [level, names, expected] :
       {std::tuple{ShardingLevel::optimizer_state, std::vector<std::string>{"0"}, "keep_gathered is for level 3 on a torch::nn::Sequential"},
        std::tuple{ShardingLevel::parameters, std::vector<std::string>{"7"}, "keep_gathered names '7', which is not a child of the Sequential (0, 1, 2, 3)"},
        std::tuple{ShardingLevel::parameters, std::vector<std::string>{"2"}, "keep_gathered names '2', which has no trainable parameters"}}) {
    auto errors = run_ranks_collect(2, [&](std::shared_ptr<cohort::Context> ctx) {
      cohort::ShardedOptions o;
      o.level = level;
      o.keep_gathered = names;
      auto model = cohort::ShardedDataParallel(make_tied(init), ctx, o);
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(errors[r]) << expected;
      try {
        std::rethrow_exception(errors[r]);
      } catch (const cohort::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
  }
}

// 8 -> 15 -> 15 -> 4: matrices of 120, 225 and 60 elements, biases of 15, 15 and 4.
TEST(ShardedMasks, MarkTheElementsOfTheParametersChosen) {
  const auto init = mlp_init(2);
  for (auto level : {ShardingLevel::optimizer_state, ShardingLevel::parameters}) {
    std::vector<double> matrices(3), all(3);
    run_ranks(3, [&](std::shared_ptr<cohort::Context> ctx) {
      cohort::ShardedOptions o;
      o.level = level;
      auto model = cohort::ShardedDataParallel(make_mlp(init), ctx, o);
      const auto shards = model->parameters();
      const auto m = model->shard_masks([](const std::string&, c10::IntArrayRef sizes) { return sizes.size() >= 2; });
      const auto every = model->shard_masks([](const std::string& name, c10::IntArrayRef) { return !name.empty(); });
      ASSERT_EQ(m.size(), shards.size());
      for (size_t i = 0; i < m.size(); ++i) {
        EXPECT_EQ(m[i].sizes(), shards[i].sizes());
        matrices[ctx->rank()] += m[i].sum().item<double>();
        all[ctx->rank()] += every[i].sum().item<double>();
      }
    });
    EXPECT_EQ(matrices[0] + matrices[1] + matrices[2], 405) << "level " << static_cast<int>(level);
    EXPECT_EQ(all[0] + all[1] + all[2], 439) << "padding is never chosen";
  }
}

}  // namespace
