// The tensor-parallel GPT layers (tp_model.h), each made from the one-process layer's parameters.
#include "mesh/tp_model.h"

#include <cohort/error.h>
#include <cohort/torch_compat.h>  // COHORT_HAS_SDPA

#include <cmath>

#include "gelu_tanh.h"
#include "mesh/sequence_parallel.h"

namespace gpt_mesh {
namespace tp = cohort::tensor_parallel;

namespace {

torch::Tensor param(torch::nn::Module& m, const std::string& name) {
  auto* p = m.named_parameters().find(name);
  if (p == nullptr) throw std::logic_error("gpt: the model has no parameter " + name);
  return p->detach();
}

torch::nn::LayerNorm layer_norm_of(torch::nn::Module& m, const std::string& prefix) {
  const torch::Tensor w = param(m, prefix + ".weight");
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({w.size(0)}));
  torch::NoGradGuard no_grad;
  ln->weight.copy_(w);
  ln->bias.copy_(param(m, prefix + ".bias"));
  return ln;
}

}  // namespace

torch::Tensor regroup_qkv(const torch::Tensor& t, int64_t tp, bool undo) {
  const int64_t rows = t.size(0);
  std::vector<int64_t> shape{3, tp, rows / (3 * tp)};
  if (undo) shape = {tp, 3, rows / (3 * tp)};
  for (int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
  return t.reshape(shape).transpose(0, 1).reshape(t.sizes()).contiguous();
}

TpLayout tp_layout(const std::string& name) {
  const auto ends = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  if (ends("attn.qkv.weight") || ends("attn.qkv.bias")) return {0, true};
  if (ends("fc.weight") || ends("fc.bias") || name == "embed.wte.weight") return {0, false};
  if (ends("attn.proj.weight") || ends("out.weight")) return {1, false};
  return {};
}

TpAttentionImpl::TpAttentionImpl(torch::nn::Module& whole, const GptConfig& c, const TpGroup& g, bool sp)
    : heads_(c.heads / g.size()), tp_(g), sp_(sp) {
  qkv_ = register_module("qkv", tp::ColumnParallelLinear(regroup_qkv(param(whole, "qkv.weight"), g.size(), false),
                                                         regroup_qkv(param(whole, "qkv.bias"), g.size(), false), g));
  proj_ = register_module("proj", tp::RowParallelLinear(param(whole, "proj.weight"), param(whole, "proj.bias"), g));
}

torch::Tensor TpAttentionImpl::forward(const torch::Tensor& x) {
  // [B, T, 3 · heads · hs] of this rank's heads (all T positions, gathered under sp)
  const torch::Tensor local = sp_ ? torch::nn::functional::linear(gather_sequence(x, tp_), qkv_->weight, qkv_->bias) : qkv_->forward(x);
  const int64_t b = local.size(0), t = local.size(1);
  const int64_t hs = local.size(2) / (3 * heads_);
  const auto qkv = local.view({b, t, 3, heads_, hs}).permute({2, 0, 3, 1, 4}).unbind(0);
  const auto &q = qkv[0], &k = qkv[1], &v = qkv[2];
#if COHORT_HAS_SDPA
  auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  auto y = torch::matmul(torch::softmax(att.masked_fill(future, -INFINITY), -1), v);
#endif
  const torch::Tensor heads = y.transpose(1, 2).contiguous().view({b, t, heads_ * hs});
  if (sp_) return reduce_scatter_sequence(torch::nn::functional::linear(heads, proj_->weight), tp_) + proj_->bias;
  return proj_->forward(heads);
}

TpBlockImpl::TpBlockImpl(torch::nn::Module& whole, const GptConfig& c, const TpGroup& g, bool sp)
    : aten_gelu_(c.aten_gelu), tp_(g), sp_(sp) {
  ln1_ = register_module("ln1", layer_norm_of(whole, "ln1"));
  auto attn = whole.named_children()["attn"];
  attn_ = register_module("attn", TpAttention(*attn, c, g, sp));
  ln2_ = register_module("ln2", layer_norm_of(whole, "ln2"));
  fc_ = register_module("fc", tp::ColumnParallelLinear(param(whole, "fc.weight"), param(whole, "fc.bias"), g));
  out_ = register_module("out", tp::RowParallelLinear(param(whole, "out.weight"), param(whole, "out.bias"), g));
}

torch::Tensor TpBlockImpl::forward(torch::Tensor x) {
  x = x + attn_->forward(ln1_->forward(x));
  if (!sp_) return x + out_->forward(gelu_tanh(fc_->forward(ln2_->forward(x)), aten_gelu_));
  namespace F = torch::nn::functional;
  const torch::Tensor h = gelu_tanh(F::linear(gather_sequence(ln2_->forward(x), tp_), fc_->weight, fc_->bias), aten_gelu_);
  return x + (reduce_scatter_sequence(F::linear(h, out_->weight), tp_) + out_->bias);
}

TpEmbedImpl::TpEmbedImpl(Embed& whole, const TpGroup& g, bool sp) : tp_(g), sp_(sp) {
  wte = register_module("wte", tp::VocabParallelEmbedding(whole->wte->weight.detach(), g));
  wpe = register_module("wpe", torch::nn::Embedding(whole->wpe->weight.size(0), whole->wpe->weight.size(1)));
  torch::NoGradGuard no_grad;
  wpe->weight.copy_(whole->wpe->weight);
}

torch::Tensor TpEmbedImpl::forward(const torch::Tensor& idx) {
  auto pos = torch::arange(idx.size(1), torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  if (!sp_) return wte->forward(idx) + wpe->forward(pos);
  // This rank's rows (zeros for the tokens it does not hold), summed over tp and split along the
  // sequence in one reduce-scatter; then the positions this rank keeps.
  const int64_t part = wte->weight.size(0), first = wte->first(), t = idx.size(1) / tp_.size();
  const torch::Tensor mine = (idx >= first) & (idx < first + part);
  const torch::Tensor rows = torch::embedding(wte->weight, (idx - first).masked_fill(~mine, 0)).masked_fill(~mine.unsqueeze(-1), 0);
  return reduce_scatter_sequence(rows, tp_) + wpe->forward(pos.narrow(0, tp_.rank() * t, t));
}

TpHeadImpl::TpHeadImpl(torch::nn::Module& whole, TpEmbed embed, const TpGroup& g, bool sp)
    : embed_(std::move(embed)), tp_(g), sp_(sp) {
  ln_f_ = register_module("ln_f", layer_norm_of(whole, "ln_f"));
}

torch::Tensor TpHeadImpl::forward(const torch::Tensor& x) {
  // Megatron's f before the vocabulary-parallel product: the hidden state's gradient is summed over
  // tp (under sp: the sequence gathered, the gradient reduce-scattered back).
  const torch::Tensor h = ln_f_->forward(x);
  return torch::nn::functional::linear(sp_ ? gather_sequence(h, tp_) : tp::copy_to_tp(h, tp_), embed_->wte->weight);
}

torch::nn::Sequential make_tp_gpt(torch::nn::Sequential& whole, const GptConfig& c, const TpGroup& g, bool sp) {
  torch::nn::Sequential seq;
  auto children = whole->named_children();
  auto whole_embed = Embed(std::dynamic_pointer_cast<EmbedImpl>(children["embed"]));
  TpEmbed embed(whole_embed, g, sp);
  seq->push_back("embed", embed);
  for (int64_t l = 0; l < c.layers; ++l) seq->push_back("block" + std::to_string(l), TpBlock(*children["block" + std::to_string(l)], c, g, sp));
  seq->push_back("head", TpHead(*children["head"], embed, g, sp));
  return seq;
}

}  // namespace gpt_mesh
