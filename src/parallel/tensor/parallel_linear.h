// parallel/tensor/parallel_linear.h — Megatron-LM's tensor-parallel linear layers over a tp group
// (issue 47; Shoeybi et al. 2019, section 3): a column-parallel layer holds a slice of the output
// features, a row-parallel one a slice of the input features, so that an MLP's column layer feeds
// its row layer with no communication between them and one allreduce at the end (forward) and one
// at the start (backward).
//
// The four operators at the edges of a tensor-parallel region, each an autograd function:
//   copy_to_tp      identity forward,                     allreduce of the gradient backward (Megatron's f)
//   reduce_from_tp  allreduce forward,                    identity backward                  (g)
//   gather_from_tp  allgather along the last dim forward, this rank's slice of the gradient back
//   scatter_to_tp   this rank's slice of the last dim,    allgather of the gradient back
// Every tp rank runs the same forwards and backwards in the same order (their collectives meet).
// The group must outlive the graphs built through these operators.
// Weights: a layer made from sizes draws the whole nn::Linear from the current RNG and keeps its
// slice, so ranks seeded alike hold the slices of one layer — the same values a one-process run
// draws (simple; the whole matrix is made once per rank at construction).
// Not here: the vocabulary over tp (vocab_parallel.h), sequence parallelism, NCCL.
#pragma once

#include <torch/torch.h>

#include "cohort/torch_compat.h"

namespace cohort::tensor_parallel {

/// The tp group a layer or operator works over, with this rank's place in it.
struct TpGroup {
  c10::intrusive_ptr<Backend> group;
  int job_rank = -1;  // this rank in the job, for messages
  int rank() const { return group->getRank(); }
  int size() const { return group->getSize(); }
};

at::Tensor copy_to_tp(const at::Tensor& x, const TpGroup& tp);
at::Tensor reduce_from_tp(const at::Tensor& x, const TpGroup& tp);
at::Tensor gather_from_tp(const at::Tensor& x, const TpGroup& tp);
at::Tensor scatter_to_tp(const at::Tensor& x, const TpGroup& tp);

/// y = x Aᵀ + b with A's rows (output features) split over the tp ranks: this rank computes its
/// slice of y's last dimension, or the whole y when `gather_output`. Throws ConfigError (naming the
/// rank) when the output features do not divide by the tp size.
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, TpGroup tp, bool gather_output = false,
                           bool bias = true);
  /// From a whole layer's weight [out, in] and bias [out] (undefined: none): this rank's slice.
  ColumnParallelLinearImpl(const at::Tensor& weight, const at::Tensor& bias, TpGroup tp, bool gather_output = false);
  at::Tensor forward(const at::Tensor& x);
  torch::Tensor weight, bias;  // [out/tp, in], [out/tp]

 private:
  void init(const at::Tensor& weight, const at::Tensor& bias);
  TpGroup tp_;
  bool gather_output_;
};
TORCH_MODULE(ColumnParallelLinear);

/// y = x Aᵀ + b with A's columns (input features) split over the tp ranks: x is this rank's slice of
/// the input features (`input_is_parallel`, as a column-parallel layer leaves it) or the whole x,
/// which is sliced here; the partial products are summed over the ranks, then b is added once.
/// Throws ConfigError when the input features do not divide by the tp size.
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, TpGroup tp, bool input_is_parallel = true,
                        bool bias = true);
  /// From a whole layer's weight [out, in] and bias [out] (undefined: none): this rank's slice.
  RowParallelLinearImpl(const at::Tensor& weight, const at::Tensor& bias, TpGroup tp, bool input_is_parallel = true);
  at::Tensor forward(const at::Tensor& x);
  torch::Tensor weight, bias;  // [out, in/tp], [out] (the same on every rank)

 private:
  void init(const at::Tensor& weight, const at::Tensor& bias);
  TpGroup tp_;
  bool input_is_parallel_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace cohort::tensor_parallel
