#include "gpt_model.h"

#include <cohort/torch_compat.h>  // COHORT_HAS_SDPA

#include "gelu_tanh.h"

#include <cmath>

int64_t GptConfig::parameters() const {
  const int64_t block = 12 * dim * dim + 13 * dim;  // qkv, proj, fc, out with biases; two LayerNorms
  return vocab * dim + positions * dim + layers * block + 2 * dim;
}

double GptConfig::flops_per_token() const {
  const double n = static_cast<double>(parameters() - positions * dim);
  return 6.0 * n + 12.0 * static_cast<double>(layers) * static_cast<double>(seq_len) * static_cast<double>(dim);
}

std::string GptConfig::problem() const {
  if (vocab < 256) return "--vocab " + std::to_string(vocab) + " is smaller than the byte tokenizer's 256 symbols";
  // The byte tokenizer uses 256 rows; more only pad the table (GPT-2's 50304, Llama 3's 128256).
  // Far more would only end in an allocation failure.
  if (vocab > (int64_t{1} << 20))
    return "--vocab " + std::to_string(vocab) + " is more than 1048576 embedding rows (the byte tokenizer uses 256)";
  if (layers < 1 || heads < 1 || dim < 1 || positions < 1 || seq_len < 1)
    return "--layers, --heads, --dim, --positions and --seq-len must be positive";
  if (dim % heads != 0)
    return "--heads " + std::to_string(heads) + " does not divide --dim " + std::to_string(dim);
  if (seq_len > positions)
    return "--seq-len " + std::to_string(seq_len) + " is longer than the position table (--positions " +
           std::to_string(positions) + ")";
  return {};
}

std::optional<GptConfig> gpt_preset(const std::string& name) {
  GptConfig c;
  if (name == "tiny") return c;
  if (name == "gpt2-124m") {
    c.vocab = 50304;  // GPT-2's 50257 rounded up to a multiple of 64, as nanoGPT does
    c.positions = c.seq_len = 1024;
    c.layers = c.heads = 12;
    c.dim = 768;
    return c;
  }
  return std::nullopt;
}

namespace {

void init_linear(torch::nn::Linear& l, double std) {
  torch::NoGradGuard no_grad;
  l->weight.normal_(0.0, std);
  if (l->bias.defined()) l->bias.zero_();
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c) : heads_(c.heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(c.dim, 3 * c.dim));
  proj_ = register_module("proj", torch::nn::Linear(c.dim, c.dim));
  init_linear(qkv_, 0.02);
  init_linear(proj_, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hs = d / heads_;
  // unbind, not qkv[0], qkv[1], qkv[2]: backward stacks the three gradients into one tensor, where
  // three selects would each zero a tensor of qkv's size and add theirs in (5 % of a tiny step).
  const auto qkv = qkv_->forward(x).view({b, t, 3, heads_, hs}).permute({2, 0, 3, 1, 4}).unbind(0);
  const auto &q = qkv[0], &k = qkv[1], &v = qkv[2];  // [B, H, T, hs]
#if COHORT_HAS_SDPA
  auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  auto y = torch::matmul(torch::softmax(att.masked_fill(future, -INFINITY), -1), v);
#endif
  return proj_->forward(y.transpose(1, 2).contiguous().view({b, t, d}));
}

BlockImpl::BlockImpl(const GptConfig& c) : aten_gelu_(c.aten_gelu) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
  attn_ = register_module("attn", CausalSelfAttention(c));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
  fc_ = register_module("fc", torch::nn::Linear(c.dim, 4 * c.dim));
  out_ = register_module("out", torch::nn::Linear(4 * c.dim, c.dim));
  init_linear(fc_, 0.02);
  init_linear(out_, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn_->forward(ln1_->forward(x));
  return x + out_->forward(gelu_tanh(fc_->forward(ln2_->forward(x)), aten_gelu_));
}

EmbedImpl::EmbedImpl(const GptConfig& c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab, c.dim));
  wpe = register_module("wpe", torch::nn::Embedding(c.positions, c.dim));
  torch::NoGradGuard no_grad;
  wte->weight.normal_(0.0, 0.02);
  wpe->weight.normal_(0.0, 0.02);
}

torch::Tensor EmbedImpl::forward(const torch::Tensor& idx) {
  auto pos = torch::arange(idx.size(1), torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  return wte->forward(idx) + wpe->forward(pos);
}

HeadImpl::HeadImpl(const GptConfig& c, Embed embed) : embed_(std::move(embed)) {
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
}

torch::Tensor HeadImpl::forward(const torch::Tensor& x) {
  return torch::nn::functional::linear(ln_f_->forward(x), embed_->wte->weight);
}

torch::nn::Sequential make_gpt(const GptConfig& c) {
  torch::nn::Sequential seq;
  Embed embed(c);
  seq->push_back("embed", embed);
  for (int64_t l = 0; l < c.layers; ++l) seq->push_back("block" + std::to_string(l), Block(c));
  seq->push_back("head", Head(c, embed));
  return seq;
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // bf16 logits in float; float64 ones (--double) as they are.
  const auto flat = logits.view({-1, logits.size(-1)});
  return torch::nn::functional::cross_entropy(flat.scalar_type() == torch::kDouble ? flat : flat.to(torch::kFloat),
                                              targets.reshape({-1}));
}
