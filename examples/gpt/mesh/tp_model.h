// The GPT's layers split over a tp group (issue 47, Megatron-LM's layout): each block's attention
// heads split across the tp ranks (q, k, v column-parallel, the output projection row-parallel),
// its MLP column- then row-parallel, the token embedding vocabulary-parallel and the output head
// a slice of the vocabulary's logits (the loss, vocab_parallel_cross_entropy, never gathers them).
// LayerNorms, the position table and the row-parallel layers' biases are replicated on every tp
// rank. Every layer is made from the one-process model's (make_gpt, same seed), with the same
// parameter names, so that a tp run starts from the same weights and its shards gather back into
// that model (full_parameter below).
// With `sp` (sequence parallelism, sequence_parallel.h) the activations between the tensor-parallel
// layers are each rank's T/tp positions: the column layers' inputs are gathered along the sequence,
// the row layers' outputs reduce-scattered along it (then their biases added), the embedding's
// partial rows reduce-scattered, the head's input gathered.
#pragma once

#include <torch/torch.h>

#include <string>

#include "gpt_model.h"
#include "parallel/tensor/vocab_parallel.h"

namespace gpt_mesh {

using cohort::tensor_parallel::TpGroup;

class TpAttentionImpl : public torch::nn::Module {
 public:
  TpAttentionImpl(torch::nn::Module& whole, const GptConfig& c, const TpGroup& tp, bool sp);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int64_t heads_;  // this rank's heads
  TpGroup tp_;
  bool sp_;
  cohort::tensor_parallel::ColumnParallelLinear qkv_{nullptr};
  cohort::tensor_parallel::RowParallelLinear proj_{nullptr};
};
TORCH_MODULE(TpAttention);

class TpBlockImpl : public torch::nn::Module {
 public:
  /// This rank's part of `whole`, a Block of the one-process model.
  TpBlockImpl(torch::nn::Module& whole, const GptConfig& c, const TpGroup& tp, bool sp);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  TpAttention attn_{nullptr};
  cohort::tensor_parallel::ColumnParallelLinear fc_{nullptr};
  cohort::tensor_parallel::RowParallelLinear out_{nullptr};
  bool aten_gelu_;
  TpGroup tp_;
  bool sp_;
};
TORCH_MODULE(TpBlock);

class TpEmbedImpl : public torch::nn::Module {
 public:
  TpEmbedImpl(Embed& whole, const TpGroup& tp, bool sp);
  torch::Tensor forward(const torch::Tensor& idx);
  cohort::tensor_parallel::VocabParallelEmbedding wte{nullptr};  // this rank's rows of the vocabulary
  torch::nn::Embedding wpe{nullptr};                             // replicated

 private:
  TpGroup tp_;
  bool sp_;
};
TORCH_MODULE(TpEmbed);

class TpHeadImpl : public torch::nn::Module {
 public:
  TpHeadImpl(torch::nn::Module& whole, TpEmbed embed, const TpGroup& tp, bool sp);
  /// Hidden states to this rank's slice of the logits [B, T, vocab / tp].
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm ln_f_{nullptr};
  TpEmbed embed_;  // not registered: its weight belongs to the "embed" child (tied)
  TpGroup tp_;
  bool sp_;
};
TORCH_MODULE(TpHead);

/// The model `whole` (make_gpt's) as this tp rank's layers, named as in `whole`: "embed",
/// "block0" ... "head".
torch::nn::Sequential make_tp_gpt(torch::nn::Sequential& whole, const GptConfig& c, const TpGroup& tp, bool sp);

/// How a parameter of the one-process model is laid out over the tp ranks: the dimension it is
/// split along (-1: replicated), and whether its rows are q, k, v regrouped by rank (qkv).
struct TpLayout {
  int dim = -1;
  bool qkv = false;
};
TpLayout tp_layout(const std::string& name);

/// The rows of a qkv weight or bias [3·d, ...] regrouped so that rank r's contiguous chunk holds
/// the q, k and v rows of its heads; `undo` puts gathered chunks back in the one-process order.
torch::Tensor regroup_qkv(const torch::Tensor& t, int64_t tp, bool undo);

}  // namespace gpt_mesh
