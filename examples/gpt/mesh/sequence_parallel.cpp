// The sequence-parallel operators (sequence_parallel.h) as autograd functions over [B, T, d].
#include "mesh/sequence_parallel.h"

#include <vector>

#include "parallel/sharded/ring_reduce_scatter.h"

namespace gpt_mesh {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using cohort::Backend;
constexpr uint32_t kRingTag = 7;  // the ring's point-to-point tags on the tp group

Backend& group_of(AutogradContext* ctx) { return *reinterpret_cast<Backend*>(ctx->saved_data["group"].toInt()); }

// [B, T/W, d] from every rank, concatenated along the sequence: [B, T, d].
at::Tensor allgather_seq(Backend& g, const at::Tensor& x) {
  std::vector<at::Tensor> in{x.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < g.getSize(); ++r) out[0].push_back(at::empty_like(in[0]));
  g.allgather(out, in)->wait();
  return at::cat(out[0], 1);
}

// [B, T, d] summed over the ranks, this rank's T/W positions: [B, T/W, d].
at::Tensor reduce_scatter_seq(Backend& g, const at::Tensor& x) {
  const int64_t w = g.getSize(), b = x.size(0), t = x.size(1), d = x.size(2);
  at::Tensor flat = x.reshape({b, w, t / w, d}).transpose(0, 1).contiguous().view({-1});  // rank r's part contiguous
  cohort::detail::ring_reduce_scatter(g, g.getRank(), static_cast<int>(w), flat, kRingTag);
  return flat.view({w, b, t / w, d})[g.getRank()].clone();
}

struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return allgather_seq(group_of(ctx), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {reduce_scatter_seq(group_of(ctx), grad[0]), at::Tensor()};
  }
};

struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reduce_scatter_seq(group_of(ctx), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {allgather_seq(group_of(ctx), grad[0]), at::Tensor()};
  }
};

int64_t handle(const cohort::tensor_parallel::TpGroup& tp) { return reinterpret_cast<int64_t>(tp.group.get()); }

}  // namespace

at::Tensor gather_sequence(const at::Tensor& x, const cohort::tensor_parallel::TpGroup& tp) {
  return GatherSequence::apply(x, handle(tp));
}
at::Tensor reduce_scatter_sequence(const at::Tensor& x, const cohort::tensor_parallel::TpGroup& tp) {
  return ReduceScatterSequence::apply(x, handle(tp));
}

}  // namespace gpt_mesh
