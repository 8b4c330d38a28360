// Tensor-parallel linear layers (issue 47) with ranks as threads over the mesh's tp group: an MLP
// of a column- then a row-parallel layer gives one process's output, input gradient and (sliced)
// weight gradients within 1e-6 relative; sizes that do not divide are one line naming the rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <string>

#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "parallel/tensor/parallel_linear.h"
#include "support/thread_ranks.h"

namespace cohort::tensor_parallel {
namespace {

struct Whole {
  torch::nn::Linear a{nullptr}, b{nullptr};
  at::Tensor x, y, x_grad;
};

// y = b(tanh(a(x))), loss = sum(y²) in one process.
Whole one_process() {
  torch::manual_seed(3);
  Whole w;
  w.a = torch::nn::Linear(8, 16);
  w.b = torch::nn::Linear(16, 8);
  w.x = torch::randn({4, 8}).requires_grad_(true);
  w.y = w.b(torch::tanh(w.a(w.x)));
  (w.y * w.y).sum().backward();
  w.y = w.y.detach();
  w.x_grad = w.x.grad().clone();
  return w;
}

// Within 1e-6 of the reference's largest magnitude.
void expect_near(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
  EXPECT_LE(err, 1e-6 * scale) << what << ": off by " << err << " of " << scale;
}

void expect_mlp_like_one_process(int tp_size, bool gather_between) {
  const Whole w = one_process();
  testing::run_ranks(tp_size, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"tp", tp_size}});
    const TpGroup tp{mesh.group("tp"), ctx->rank()};
    // gather_between: the column layer gathers its output and the row layer slices it again.
    ColumnParallelLinear a(w.a->weight.detach(), w.a->bias.detach(), tp, /*gather_output=*/gather_between);
    RowParallelLinear b(w.b->weight.detach(), w.b->bias.detach(), tp, /*input_is_parallel=*/!gather_between);
    const at::Tensor x = w.x.detach().clone().requires_grad_(true);
    const at::Tensor y = b(torch::tanh(a(x)));
    (y * y).sum().backward();
    const std::string what = "tp=" + std::to_string(tp_size) + " rank " + std::to_string(ctx->rank());
    const int r = tp.rank();
    expect_near(y, w.y, what + " output");
    expect_near(x.grad(), w.x_grad, what + " input gradient");
    expect_near(a->weight.grad(), w.a->weight.grad().chunk(tp_size, 0)[r], what + " column weight gradient");
    expect_near(a->bias.grad(), w.a->bias.grad().chunk(tp_size, 0)[r], what + " column bias gradient");
    expect_near(b->weight.grad(), w.b->weight.grad().chunk(tp_size, 1)[r], what + " row weight gradient");
    expect_near(b->bias.grad(), w.b->bias.grad(), what + " row bias gradient");
  });
}

TEST(TensorParallel, ColumnThenRowParallelMlpMatchesOneProcess) {
  expect_mlp_like_one_process(2, false);
  expect_mlp_like_one_process(4, false);
}

TEST(TensorParallel, GatheredOutputAndScatteredInputMatchOneProcess) {
  expect_mlp_like_one_process(2, true);
  expect_mlp_like_one_process(4, true);
}

TEST(TensorParallel, LayersFromSizesHoldTheSlicesOfOneProcesssLayer) {
  std::mutex rng;  // the ranks share one process's random generator: draw one rank at a time
  testing::run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"tp", 2}});
    const TpGroup tp{mesh.group("tp"), ctx->rank()};
    std::lock_guard<std::mutex> lock(rng);
    torch::manual_seed(5);
    ColumnParallelLinear a(8, 16, tp);
    torch::manual_seed(5);
    torch::nn::Linear whole(8, 16);
    EXPECT_TRUE(torch::equal(a->weight, whole->weight.chunk(2, 0)[tp.rank()]));
    EXPECT_TRUE(torch::equal(a->bias, whole->bias.chunk(2, 0)[tp.rank()]));
  });
}

TEST(TensorParallel, FeaturesThatDoNotDivideAreOneLineNamingTheRank) {
  testing::run_ranks(4, [](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"tp", 4}});
    const TpGroup tp{mesh.group("tp"), ctx->rank()};
    try {
      ColumnParallelLinear(8, 10, tp);
      ADD_FAILURE() << "10 output features over 4 tp ranks accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(ctx->rank()) +
                                           ": ColumnParallelLinear: 10 output features do not divide over 4 tp ranks");
    }
    EXPECT_THROW(RowParallelLinear(6, 8, tp), ConfigError);
  });
}

}  // namespace
}  // namespace cohort::tensor_parallel
