// Sequence parallelism for the LayerNorm regions of a tensor-parallel block (issue 47; Korthikanti
// et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Megatron-LM's
// sequence_parallel): between the tensor-parallel layers, each tp rank holds its T/tp positions of
// the activations [B, T, d] instead of all of them, so LayerNorm and the residual adds run on a
// tp-th of the tokens and the pipeline sends a tp-th of the bytes. The allreduce at a row-parallel
// layer's output becomes a reduce-scatter along the sequence, the identity at a column-parallel
// layer's input an allgather: the same bytes on the wire as tensor parallelism alone.
//   gather_sequence          allgather along dim 1 forward, reduce-scatter of the gradient backward
//   reduce_scatter_sequence  reduce-scatter along dim 1 forward, allgather of the gradient backward
// The parameters in these regions (LayerNorms, the row-parallel layers' biases, the position table)
// see a tp-th of the tokens each: their gradients are summed over tp after backward
// (MeshModel::sum_sequence_parallel_grads). The reduce-scatter is the library's ring over Gloo's
// point-to-point (torch 1.13's Gloo has none). Here in the example until it moves to
// src/parallel/tensor.
#pragma once

#include <torch/torch.h>

#include "parallel/tensor/parallel_linear.h"

namespace gpt_mesh {

at::Tensor gather_sequence(const at::Tensor& x, const cohort::tensor_parallel::TpGroup& tp);
at::Tensor reduce_scatter_sequence(const at::Tensor& x, const cohort::tensor_parallel::TpGroup& tp);

}  // namespace gpt_mesh
