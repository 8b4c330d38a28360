// examples/gpt's tanh-GELU kernel against ATen's torch::gelu(x, "tanh"): the same function, value
// and gradient, within float rounding; and the cases it must leave to ATen.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

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
