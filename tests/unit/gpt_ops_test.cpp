// The GPT example's own operations against the libtorch ones they replace: the tanh-GELU kernel
// against ATen's torch::gelu(x, "tanh") (the same function, value and gradient, within float
// rounding; and the cases it leaves to ATen), the queued gradient clipping against libtorch's
// clip_grad_norm_ (bitwise).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "../examples/gpt/clip_grad.h"
#include "../examples/gpt/gelu_tanh.h"

namespace {

// Normal values over the range GPT activations take, the tails where tanh saturates and the
// exponential is clamped, and a length that is no multiple of any vector width.
torch::Tensor gelu_inputs() {
  torch::manual_seed(3);
  auto x = torch::randn({100003}) * 3.0;
  auto tails = torch::tensor({0.0f, -0.0f, 1e-7f, -1e-7f, 1e-3f, -1e-3f, 5.f, -5.f, 9.f, -9.f, 30.f, -30.f,
                              87.f, -87.f, 200.f, -200.f});
  return torch::cat({x, tails});
}

double max_error(const torch::Tensor& ours, const torch::Tensor& aten) {
  // |difference| over max(1, |ATen's value|): absolute near zero, relative for large values.
  return ((ours - aten).abs() / aten.abs().clamp_min(1.0)).max().item<double>();
}

}  // namespace

TEST(GptGelu, TheKernelComputesAtensTanhGeluAndItsGradient) {
  const auto x = gelu_inputs();
  const auto g = torch::randn_like(x);
  auto xo = x.clone().requires_grad_(true), xa = x.clone().requires_grad_(true);
  auto yo = gelu_tanh(xo);
  auto ya = torch::gelu(xa, "tanh");
  ASSERT_NE(yo.grad_fn(), nullptr);
  EXPECT_NE(yo.grad_fn()->name().find("GeluTanh"), std::string::npos) << "ATen's op ran: " << yo.grad_fn()->name();
  EXPECT_LT(max_error(yo.detach(), ya.detach()), 2e-6);
  (yo * g).sum().backward();
  (ya * g).sum().backward();
  EXPECT_LT(max_error(xo.grad(), xa.grad()), 2e-5);
  EXPECT_TRUE(torch::isfinite(yo).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(xo.grad()).all().item<bool>());
}

TEST(GptGelu, IntraOpThreadsSplitTheLoopWithoutChangingABit) {
  const auto x = gelu_inputs();
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = gelu_tanh(x);
  at::set_num_threads(2);
  const auto two = gelu_tanh(x);
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one, two));
}

TEST(GptGelu, OtherTensorsAndTheAtenFlagGoThroughAtensOp) {
  const auto x = gelu_inputs().narrow(0, 0, 4096).view({64, 64});
  const auto strided = x.t();  // not contiguous
  EXPECT_TRUE(torch::equal(gelu_tanh(strided), torch::gelu(strided, "tanh")));
  EXPECT_TRUE(torch::equal(gelu_tanh(x, /*aten=*/true), torch::gelu(x, "tanh")));
  const auto d = x.to(torch::kDouble);
  EXPECT_TRUE(torch::equal(gelu_tanh(d), torch::gelu(d, "tanh")));
}

namespace {

// Parameters whose gradients have a global norm of about 3·sqrt(n): far above 1, so clipping scales.
std::vector<torch::Tensor> params_with_gradients(int64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params;
  for (auto shape : {std::vector<int64_t>{64, 32}, {32}, {7, 5, 3}, {1}}) {
    auto p = torch::randn(shape).requires_grad_(true);
    p.mutable_grad() = torch::randn(shape) * 3.0;
    params.push_back(p);
  }
  params.push_back(torch::randn({4}).requires_grad_(true));  // no gradient: left alone by both
  return params;
}

}  // namespace

TEST(GptClip, TheQueuedClipIsLibtorchsClipWithoutTheReadBack) {
  for (const double max_norm : {1.0, 1e6}) {  // scaled, and left as it was
    auto ours = params_with_gradients(5), theirs = params_with_gradients(5);
    clip_grad_norm_queued(ours, max_norm);
    const double norm = torch::nn::utils::clip_grad_norm_(theirs, max_norm);
    EXPECT_GT(norm, 10.0);
    for (size_t i = 0; i + 1 < ours.size(); ++i)
      EXPECT_TRUE(torch::equal(ours[i].grad(), theirs[i].grad())) << "parameter " << i << ", max_norm " << max_norm;
    EXPECT_FALSE(ours.back().grad().defined());
  }
  auto before = params_with_gradients(5), clipped = params_with_gradients(5);
  clip_grad_norm_queued(clipped, 1.0);
  EXPECT_FALSE(torch::equal(before[0].grad(), clipped[0].grad()));  // it did scale
}
