// parallel/tensor/vocab_parallel.h — the vocabulary split over the tp ranks (issue 47; Megatron-LM's
// VocabParallelEmbedding and vocab-parallel cross-entropy): rank r holds tokens
// [r·V/tp, (r+1)·V/tp) of the embedding table, and of the logits the output layer makes, so that
// neither the table's gradient nor the logits [tokens, V] are ever whole on one rank.
//   embedding: each rank looks up the tokens it holds (zeros for the others); one allreduce sums them.
//   cross-entropy: from each rank's logits slice, three allreduces of one number per token (the
//   max, the target's logit, the sum of exponentials) give the loss; the backward is local
//   (softmax minus one at the target, on this rank's slice). The logits are never gathered.
// The group must outlive the graphs built through these (as parallel_linear.h's operators).
#pragma once

#include <torch/torch.h>

#include "parallel/tensor/parallel_linear.h"

namespace cohort::tensor_parallel {

/// An embedding table of `vocab` × `dim` split by rows over the tp ranks. Throws ConfigError
/// (naming the rank) when the vocabulary does not divide by the tp size.
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  /// The whole table drawn as nn::Embedding draws it (N(0, 1)) from the current generator, sliced.
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, TpGroup tp);
  /// This rank's rows of a whole table [vocab, dim].
  VocabParallelEmbeddingImpl(const at::Tensor& whole, TpGroup tp);
  /// Token ids (any shape, each in 0..vocab-1) to their rows [..., dim], the same on every rank.
  at::Tensor forward(const at::Tensor& ids);
  torch::Tensor weight;  // [vocab/tp, dim]
  int64_t first() const { return first_; }  // the first token this rank holds

 private:
  void init(const at::Tensor& whole);
  TpGroup tp_;
  int64_t vocab_ = 0, first_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

/// Cross-entropy per token from this rank's slice of the logits [tokens, V/tp] (vocabulary tokens
/// [rank·V/tp, (rank+1)·V/tp)) and the targets [tokens] (ids in 0..V-1): the same [tokens] losses on
/// every rank as at::cross_entropy over the whole logits with reduction none. Differentiable in
/// the logits slice.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const TpGroup& tp);

}  // namespace cohort::tensor_parallel
