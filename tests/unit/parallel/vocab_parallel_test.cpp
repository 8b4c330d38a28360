// The vocabulary-parallel embedding and cross-entropy (issue 47) with ranks as threads over the
// mesh's tp group, against one process's nn::Embedding and cross_entropy over the whole vocabulary.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "parallel/tensor/vocab_parallel.h"
#include "support/thread_ranks.h"

namespace cohort::tensor_parallel {
namespace {

namespace F = torch::nn::functional;
constexpr int64_t kVocab = 16;

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
  EXPECT_LE(err, 1e-6 * scale) << what << ": off by " << err << " of " << scale;
}

TEST(VocabParallel, CrossEntropyFromLogitSlicesMatchesTheWholeLogits) {
  torch::manual_seed(9);
  const at::Tensor logits = torch::randn({2, 5, kVocab}) * 3;  // [batch, sequence, vocabulary]
  const at::Tensor targets = torch::randint(0, kVocab, {2, 5}, torch::kLong);
  const at::Tensor whole = logits.clone().requires_grad_(true);
  const at::Tensor per_token = F::cross_entropy(whole.reshape({-1, kVocab}), targets.reshape({-1}),
                                                F::CrossEntropyFuncOptions().reduction(torch::kNone));
  per_token.mean().backward();
  for (int tp_size : {2, 4}) {
    testing::run_ranks(tp_size, [&](std::shared_ptr<Context> ctx) {
      DeviceMesh mesh(ctx, {{"tp", tp_size}});
      const TpGroup tp{mesh.group("tp"), ctx->rank()};
      const at::Tensor mine = logits.chunk(tp_size, -1)[tp.rank()].clone().requires_grad_(true);
      const at::Tensor losses = vocab_parallel_cross_entropy(mine, targets, tp);
      losses.mean().backward();
      const std::string what = "tp=" + std::to_string(tp_size) + " rank " + std::to_string(ctx->rank());
      expect_close(losses, per_token.detach().reshape({2, 5}), what + " losses");
      expect_close(mine.grad(), whole.grad().chunk(tp_size, -1)[tp.rank()], what + " logits' gradient");
    });
  }
}

TEST(VocabParallel, EmbeddingLooksEachTokenUpOnItsRankOnly) {
  torch::manual_seed(4);
  const at::Tensor table = torch::randn({kVocab, 5});
  const at::Tensor ids = torch::randint(0, kVocab, {3, 4}, torch::kLong);
  const at::Tensor upstream = torch::randn({3, 4, 5});
  const at::Tensor whole = table.clone().requires_grad_(true);
  const at::Tensor rows = F::embedding(ids, whole);
  (rows * upstream).sum().backward();
  testing::run_ranks(4, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"tp", 4}});
    const TpGroup tp{mesh.group("tp"), ctx->rank()};
    VocabParallelEmbedding embedding(table, tp);
    const at::Tensor got = embedding(ids);
    (got * upstream).sum().backward();
    // One rank adds its row to the others' zeros: exact.
    EXPECT_TRUE(torch::equal(got, rows.detach())) << "rank " << ctx->rank();
    EXPECT_TRUE(torch::equal(embedding->weight.grad(), whole.grad().chunk(4, 0)[tp.rank()])) << "rank " << ctx->rank();
    EXPECT_EQ(embedding->first(), 4 * tp.rank());
  });
}

TEST(VocabParallel, AVocabularyThatDoesNotDivideAndTokensOutsideItAreOneLine) {
  testing::run_ranks(4, [](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"tp", 4}});
    const TpGroup tp{mesh.group("tp"), ctx->rank()};
    try {
      VocabParallelEmbedding(torch::zeros({50, 3}), tp);
      ADD_FAILURE() << "50 tokens over 4 tp ranks accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(ctx->rank()) +
                                           ": VocabParallelEmbedding: a vocabulary of 50 tokens does not divide over 4 tp ranks");
    }
    VocabParallelEmbedding embedding(torch::zeros({kVocab, 3}), tp);
    EXPECT_THROW(embedding(torch::tensor({3, 16}, torch::kLong)), ConfigError);
  });
}

}  // namespace
}  // namespace cohort::tensor_parallel
