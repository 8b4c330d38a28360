// GELU with the tanh approximation (GPT-2's), forward and backward, over plain float arrays: the
// loops of gelu_tanh.cpp's autograd function, kept free of torch so that they compile to vector
// code for the CPU they run on (gelu_kernel.cpp).
#pragma once

#include <cstdint>

namespace gpt_kernels {

/// y[i] = x·(1 + tanh(β(x + κx³)))/2 with β = √(2/π), κ = 0.044715, for i < n.
void gelu_tanh_forward(const float* x, float* y, int64_t n);
/// dx[i] = dy[i] · d/dx of the above at x[i], for i < n.
void gelu_tanh_backward(const float* dy, const float* x, float* dx, int64_t n);

}  // namespace gpt_kernels
