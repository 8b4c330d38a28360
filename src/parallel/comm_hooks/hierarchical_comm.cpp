#include "hierarchical_comm.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include "cohort/error.h"
#include "runtime/agent_link/flight_op.h"
#include "runtime/context_internals.h"

namespace cohort::detail {

std::string HierarchicalComm::unavailable(const Context& ctx) {
  const JobEnv& e = ctx.env();
  const int local = e.local_world_size;
  if (local < 2) return "one rank per node";
  if (local >= e.world_size) return "every rank on one node";
  if (e.world_size % local != 0) return "ranks per node differ";
  if (e.rank != e.node_rank * local + e.local_rank) return "ranks are not numbered node by node";
  if (!ctx.options().shm_allreduce) return "shared memory is turned off (COHORT_SHM=0)";
#ifndef COHORT_WITH_GLOO
  return "this build has no Gloo";
#endif
  return "";
}

std::unique_ptr<HierarchicalComm> HierarchicalComm::create(Context& ctx, int64_t sequence, std::string& why) {
  why = unavailable(ctx);
  // The layout is read from each rank's own environment: agree on it (and on the segments
  // mapping) with one tiny allreduce, so that every rank takes the same path.
  const JobEnv& e = ctx.env();
  const std::string prefix = "cohort/ddp/" + std::to_string(sequence) + "/hierarchical/";
  std::unique_ptr<ShmAllreduce> node;
  auto agree = [&](bool ok) {
    std::vector<at::Tensor> flag{torch::tensor({ok ? 0 : 1}, torch::kInt)};
    FlightScope entry(flight_op("allreduce", "hierarchical layout check", -1, flag[0]));
    ctx.group()->allreduce(flag)->wait();
    entry.done();
    return flag[0].item<int>() == 0;
  };
  if (!agree(why.empty())) {
    if (why.empty()) why = "another rank's layout does not allow it";
    return nullptr;
  }
  node = ShmAllreduce::create(
      e.local_rank, e.local_world_size, /*eligible=*/true,
      c10::make_intrusive<c10d::PrefixStore>(prefix + "node" + std::to_string(e.node_rank) + "/",
                                             ContextInternals::generation_store(ctx)),
      ctx.options().collective_timeout, ctx.options().shm_slot_bytes);
  if (!agree(node != nullptr)) {
    why = "a node could not map its shared memory";
    return nullptr;
  }
  std::unique_ptr<HierarchicalComm> comm(new HierarchicalComm(ctx, std::move(node)));
  comm->cross_ = make_cpu_subgroup(ctx, prefix + "cross" + std::to_string(e.local_rank) + "/", e.node_rank,
                                   e.world_size / e.local_world_size);
  comm->flat_ = std::make_unique<GroupHookComm>(ctx.group(), detail::ContextInternals::shm_allreduce(ctx), e.rank, e.world_size);
  comm->cross_compressed_ = std::make_unique<GroupHookComm>(comm->cross_, nullptr, e.rank, e.world_size / e.local_world_size,
                                                            "ddp between nodes", e.node_rank);
  return comm;
}

HierarchicalComm::HierarchicalComm(Context& ctx, std::unique_ptr<ShmAllreduce> node)
    : rank_(ctx.rank()),
      world_(ctx.world_size()),
      local_rank_(ctx.local_rank()),
      local_world_(ctx.local_world_size()),
      node_(std::move(node)) {}

HierarchicalComm::~HierarchicalComm() = default;

void HierarchicalComm::allreduce_sum(at::Tensor& t) {
  check_contiguous(t);
  if (t.numel() == 0) return;
  note_handed(t);
  if (!failed_.empty()) throw CommError(rank_, "hierarchical allreduce: an earlier bucket failed (" + failed_ + ")");
  try {
    allreduce_steps(t);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    failed_ = what.substr(0, what.find('\n'));
    throw;
  }
}

void HierarchicalComm::allreduce_steps(at::Tensor& t) {
  const bool compressed = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  if (!ShmAllreduce::supports(t) && !(compressed && t.device().is_cpu())) {
    flat_->set_bucket(bucket_);
    flat_->allreduce_sum(t);
    bytes_.fetch_add(static_cast<int64_t>(t.nbytes()), std::memory_order_relaxed);
    return;
  }
  torch::NoGradGuard no_grad;
  at::Tensor sum = compressed ? t.to(at::kFloat) : t;  // a compressed bucket: float inside the node
  const PaddedFlat padded = PaddedFlat::of(sum, local_world_);
  at::Tensor flat = padded.flat;
  at::Tensor part = flat.narrow(0, local_rank_ * padded.chunk, padded.chunk);
  node_->reduce_scatter_async(flat, part, 1.0, "ddp node reduce-scatter", bucket_, /*gradient=*/true)->wait();
  if (compressed) {
    at::Tensor wire = part.to(t.scalar_type());  // the node's sum, rounded once
    cross_compressed_->set_bucket(bucket_);
    cross_compressed_->allreduce_sum(wire);
    part.copy_(wire);
    bytes_.fetch_add(static_cast<int64_t>(wire.nbytes()), std::memory_order_relaxed);
  } else {
    std::vector<at::Tensor> tensors{part};
    FlightScope entry(flight_op("allreduce", "ddp between nodes", bucket_, part, nullptr, /*gradient=*/true));
    auto work = cross_->allreduce(tensors);
    wait_for(work, rank_, "hierarchical allreduce between nodes");
    entry.done();
    bytes_.fetch_add(static_cast<int64_t>(part.nbytes()), std::memory_order_relaxed);
  }
  node_->allgather_async(flat, "ddp node allgather", bucket_)->wait();
  padded.copy_back(sum);
  if (compressed) t.copy_(sum);  // exact: every value is the half or bfloat16 the link summed
}

}  // namespace cohort::detail
