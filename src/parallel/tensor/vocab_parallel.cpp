// The vocabulary-parallel embedding and cross-entropy (vocab_parallel.h). The cross-entropy is an
// autograd function of its own: its backward needs no communication (softmax on this rank's slice,
// minus one at the target where this rank holds it), so it keeps only that slice's softmax.
#include "parallel/tensor/vocab_parallel.h"

#include <string>

#include "cohort/error.h"

namespace cohort::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor allreduce(Backend& g, const at::Tensor& t, c10d::ReduceOp op) {
  std::vector<at::Tensor> v{t.contiguous().clone()};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  try {
    g.allreduce(v, options)->wait();
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw CommError(-1, "tensor parallel: the cross-entropy's allreduce on tp rank " + std::to_string(g.getRank()) +
                            " failed; a peer may have died or hung (" + cause.substr(0, cause.find('\n')) + ")");
  }
  return v[0];
}

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
  // logits [N, V/tp], targets [N]: losses [N].
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets, int64_t group) {
    Backend& g = *reinterpret_cast<Backend*>(group);
    const int64_t part = logits.size(-1), first = g.getRank() * part;
    const at::Tensor max = allreduce(g, std::get<0>(logits.max(-1)), c10d::ReduceOp::MAX);
    const at::Tensor shifted = logits - max.unsqueeze(-1);
    const at::Tensor mine = (targets >= first) & (targets < first + part);
    const at::Tensor local = (targets - first).masked_fill(~mine, 0);
    const at::Tensor picked = allreduce(g, shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(~mine, 0),
                                        c10d::ReduceOp::SUM);
    const at::Tensor exp = shifted.exp();
    const at::Tensor sum = allreduce(g, exp.sum(-1), c10d::ReduceOp::SUM);
    ctx->save_for_backward({exp / sum.unsqueeze(-1), local, mine});
    return sum.log() - picked;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor d = saved[0].clone();
    d.scatter_add_(-1, saved[1].unsqueeze(-1), -saved[2].to(d.scalar_type()).unsqueeze(-1));
    return {d * grad[0].unsqueeze(-1), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, TpGroup tp) : tp_(std::move(tp)) {
  init(torch::nn::Embedding(vocab, dim)->weight.detach());
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const at::Tensor& whole, TpGroup tp) : tp_(std::move(tp)) {
  init(whole.detach());
}

void VocabParallelEmbeddingImpl::init(const at::Tensor& whole) {
  vocab_ = whole.size(0);
  if (vocab_ % tp_.size() != 0)
    throw ConfigError(tp_.job_rank, "VocabParallelEmbedding: a vocabulary of " + std::to_string(vocab_) +
                                        " tokens does not divide over " + std::to_string(tp_.size()) + " tp ranks");
  const int64_t part = vocab_ / tp_.size();
  first_ = tp_.rank() * part;
  weight = register_parameter("weight", whole.narrow(0, first_, part).clone());
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= vocab_))
    throw ConfigError(tp_.job_rank, "VocabParallelEmbedding: token ids must be in 0.." + std::to_string(vocab_ - 1) +
                                        " (got " + std::to_string(ids.min().item<int64_t>()) + ".." +
                                        std::to_string(ids.max().item<int64_t>()) + ")");
  const at::Tensor mine = (ids >= first_) & (ids < first_ + weight.size(0));
  const at::Tensor rows = torch::embedding(weight, (ids - first_).masked_fill(~mine, 0));
  return reduce_from_tp(rows.masked_fill(~mine.unsqueeze(-1), 0), tp_);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const TpGroup& tp) {
  const int64_t part = logits.size(-1);
  const at::Tensor flat = CrossEntropy::apply(logits.reshape({-1, part}), targets.reshape({-1}),
                                              reinterpret_cast<int64_t>(tp.group.get()));
  return flat.reshape(targets.sizes());
}

}  // namespace cohort::tensor_parallel
