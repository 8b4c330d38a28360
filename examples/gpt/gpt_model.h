// A GPT-2-style decoder-only language model in libtorch's C++ frontend: token and position
// embeddings, pre-norm blocks (causal self-attention, GELU MLP), a final LayerNorm and an output
// head tied to the token embedding. Laid out as a torch::nn::Sequential of
//   "embed" (wte, wpe) · "block0" ... "block{L-1}" · "head" (ln_f, then x · wteᵀ)
// so that cohort's sharded data parallel can gather and free it block by block at level 3; the
// head reads the embedding's weight (not a parameter of its own), so the level-3 wrapper keeps
// "embed" gathered through the forward (ShardedOptions::keep_gathered).
// Attention uses libtorch's scaled_dot_product_attention where it has one (2.x), else an explicit
// masked softmax (1.13). Initialisation as GPT-2: N(0, 0.02), residual projections scaled by
// 1/sqrt(2L), biases zero. No dropout: training is bitwise reproducible.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

struct GptConfig {
  int64_t vocab = 256;      // embedding rows (the byte tokenizer uses 256 of them)
  int64_t positions = 256;  // the position table: the longest sequence the model takes
  int64_t seq_len = 256;    // training sequence length (<= positions)
  int64_t layers = 4, heads = 4, dim = 256;
  bool aten_gelu = false;  // ATen's tanh-GELU on CPU too, instead of gelu_tanh.h's kernel

  /// Trainable parameters, the tied head counted once.
  int64_t parameters() const;
  /// Training FLOPs per token: 6·N (N without the position table) + 12·L·T·d for attention's two
  /// matrix products, forward and backward (PaLM's appendix B; nanoGPT's estimate_mfu).
  double flops_per_token() const;
  /// An empty string, or the first problem: heads not dividing dim, seq_len beyond positions, ...
  std::string problem() const;
};

/// "tiny" (CPU: 4 layers × 256, 3.2 M parameters) or "gpt2-124m" (12 × 768, 1024 positions,
/// vocabulary padded to 50304 as nanoGPT does); nullopt for another name.
std::optional<GptConfig> gpt_preset(const std::string& name);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const GptConfig& c);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const GptConfig& c);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, out_{nullptr};
  bool aten_gelu_;
};
TORCH_MODULE(Block);

class EmbedImpl : public torch::nn::Module {
 public:
  EmbedImpl(const GptConfig& c);
  /// Token ids [B, T] (int64) to hidden states [B, T, dim].
  torch::Tensor forward(const torch::Tensor& idx);
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
};
TORCH_MODULE(Embed);

class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(const GptConfig& c, Embed embed);
  /// Hidden states to logits [B, T, vocab], through the token embedding's weight.
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm ln_f_{nullptr};
  Embed embed_;  // not registered: its weight belongs to the "embed" child
};
TORCH_MODULE(Head);

/// The model, initialised from the current torch seed.
torch::nn::Sequential make_gpt(const GptConfig& c);

/// Mean cross-entropy of next-token logits [B, T, V] against targets [B, T].
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);
