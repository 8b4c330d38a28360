// The MLP's activation: GELU with the tanh approximation, as torch::gelu(x, "tanh") computes it.
#pragma once

#include <torch/torch.h>

/// Contiguous float32 CPU tensors go through the example's vectorised kernels (gelu_kernel.h,
/// ~3× ATen's on CPU), every other tensor (CUDA, bf16 under autocast, views) through ATen's op;
/// `aten` forces ATen's op (the example's --aten-gelu, for comparison). Differentiable.
torch::Tensor gelu_tanh(const torch::Tensor& x, bool aten = false);
