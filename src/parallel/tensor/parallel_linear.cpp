// The tensor-parallel operators as autograd functions, and the two layers built on them. A
// function keeps its group as a raw pointer in the autograd context (saved_data holds IValues,
// and a process group is not one on every libtorch): the group outlives the graph (header).
#include "parallel/tensor/parallel_linear.h"

#include <string>

#include "cohort/error.h"

namespace cohort::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t handle(const TpGroup& tp) { return reinterpret_cast<int64_t>(tp.group.get()); }
Backend& group_of(AutogradContext* ctx) { return *reinterpret_cast<Backend*>(ctx->saved_data["group"].toInt()); }

void wait(Backend& g, const WorkHandle& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw CommError(-1, std::string("tensor parallel: the ") + what + " of tp rank " + std::to_string(g.getRank()) +
                            " failed; a peer may have died or hung (" + cause.substr(0, cause.find('\n')) + ")");
  }
}

at::Tensor allreduced(Backend& g, const at::Tensor& t) {
  std::vector<at::Tensor> v{t.contiguous().clone()};
  wait(g, g.allreduce(v), "allreduce");
  return v[0];
}

at::Tensor gathered(Backend& g, const at::Tensor& t) {
  std::vector<at::Tensor> in{t.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < g.getSize(); ++r) out[0].push_back(at::empty_like(in[0]));
  wait(g, g.allgather(out, in), "allgather");
  return at::cat(out[0], -1);
}

at::Tensor sliced(Backend& g, const at::Tensor& t) {
  const int64_t last = t.size(-1);
  if (last % g.getSize() != 0)
    throw ConfigError(-1, "tensor parallel: a last dimension of " + std::to_string(last) + " does not divide over " +
                              std::to_string(g.getSize()) + " tp ranks (tp rank " + std::to_string(g.getRank()) + ")");
  return t.chunk(g.getSize(), -1)[g.getRank()].contiguous();
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {allreduced(group_of(ctx), grad[0]), at::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return allreduced(group_of(ctx), x);
  }
  static variable_list backward(AutogradContext*, variable_list grad) { return {grad[0], at::Tensor()}; }
};

struct GatherFromTp : torch::autograd::Function<GatherFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return gathered(group_of(ctx), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {sliced(group_of(ctx), grad[0]), at::Tensor()};
  }
};

struct ScatterToTp : torch::autograd::Function<ScatterToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return sliced(group_of(ctx), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {gathered(group_of(ctx), grad[0]), at::Tensor()};
  }
};

void check_divides(const TpGroup& tp, const char* layer, int64_t features, const char* which) {
  if (features % tp.size() != 0)
    throw ConfigError(tp.job_rank, std::string(layer) + ": " + std::to_string(features) + " " + which +
                                       " features do not divide over " + std::to_string(tp.size()) + " tp ranks");
}

torch::nn::Linear whole(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

}  // namespace

at::Tensor copy_to_tp(const at::Tensor& x, const TpGroup& tp) { return CopyToTp::apply(x, handle(tp)); }
at::Tensor reduce_from_tp(const at::Tensor& x, const TpGroup& tp) { return ReduceFromTp::apply(x, handle(tp)); }
at::Tensor gather_from_tp(const at::Tensor& x, const TpGroup& tp) { return GatherFromTp::apply(x, handle(tp)); }
at::Tensor scatter_to_tp(const at::Tensor& x, const TpGroup& tp) { return ScatterToTp::apply(x, handle(tp)); }

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, TpGroup tp, bool gather_output, bool bias)
    : tp_(std::move(tp)), gather_output_(gather_output) {
  check_divides(tp_, "ColumnParallelLinear", out, "output");
  auto full = whole(in, out, bias);
  init(full->weight, full->bias);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const at::Tensor& w, const at::Tensor& b, TpGroup tp, bool gather_output)
    : tp_(std::move(tp)), gather_output_(gather_output) {
  check_divides(tp_, "ColumnParallelLinear", w.size(0), "output");
  init(w, b);
}

// Rows [rank·out/tp, (rank+1)·out/tp) of the weight and of the bias.
void ColumnParallelLinearImpl::init(const at::Tensor& w, const at::Tensor& b) {
  torch::NoGradGuard no_grad;
  weight = register_parameter("weight", w.chunk(tp_.size(), 0)[tp_.rank()].clone());
  if (b.defined()) bias = register_parameter("bias", b.chunk(tp_.size(), 0)[tp_.rank()].clone());
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = torch::nn::functional::linear(copy_to_tp(x, tp_), weight, bias);
  return gather_output_ ? gather_from_tp(y, tp_) : y;
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, TpGroup tp, bool input_is_parallel, bool bias)
    : tp_(std::move(tp)), input_is_parallel_(input_is_parallel) {
  check_divides(tp_, "RowParallelLinear", in, "input");
  auto full = whole(in, out, bias);
  init(full->weight, full->bias);
}

RowParallelLinearImpl::RowParallelLinearImpl(const at::Tensor& w, const at::Tensor& b, TpGroup tp, bool input_is_parallel)
    : tp_(std::move(tp)), input_is_parallel_(input_is_parallel) {
  check_divides(tp_, "RowParallelLinear", w.size(1), "input");
  init(w, b);
}

// Columns [rank·in/tp, (rank+1)·in/tp) of the weight; the whole bias, added once after the sum.
void RowParallelLinearImpl::init(const at::Tensor& w, const at::Tensor& b) {
  torch::NoGradGuard no_grad;
  weight = register_parameter("weight", w.chunk(tp_.size(), 1)[tp_.rank()].contiguous().clone());
  if (b.defined()) bias = register_parameter("bias", b.clone());
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor in = input_is_parallel_ ? x : scatter_to_tp(x, tp_);
  at::Tensor y = reduce_from_tp(torch::nn::functional::linear(in, weight), tp_);
  return bias.defined() ? y + bias : y;
}

}  // namespace cohort::tensor_parallel
