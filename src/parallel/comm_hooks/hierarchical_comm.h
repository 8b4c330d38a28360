// HierarchicalComm: allreduce in two levels for jobs with several ranks on each of several nodes
// (internal; docs/communication.md).
//
//   1. inside each node, a reduce-scatter through shared memory: local rank l gets the node's sum
//      of part l of the tensor (parts of n/L, L ranks per node);
//   2. between nodes, local rank l of every node allreduces part l over Gloo (L groups of N ranks,
//      one per local rank, all at once: every rank of a node uses the link, none is idle);
//   3. inside each node, an allgather through shared memory puts every part everywhere.
// Between nodes each node sends 2(N-1)/N of the tensor in all, where a flat ring over W = N·L
// ranks sends 2(W-1)/W from each rank whose successor is on another node — and the flat ring
// also waits, step by step, for its slowest link. Parts are copied, so every rank ends with
// bitwise the same bytes. The shared-memory engine sums float and double; a half or bfloat16
// tensor (the fp16 and bf16 hooks' buckets) is summed inside the node in float, where there is
// no wire to save, and crosses the link in its own dtype: the compression applies where it pays,
// and the node's sum is rounded once instead of at every addition. Other dtypes go flat.
//
// Needs node-major ranks (rank = node · L + local rank, as `cohort run` and torchrun assign
// them), the same L on every node, and shared memory on every node; available() says why not.
#pragma once

#include <memory>
#include <string>

#include "cohort/context.h"
#include "hook_comm.h"

namespace cohort::detail {

class HierarchicalComm final : public ReducerComm {
 public:
  /// Why this job cannot use it ("" if it can); the same verdict on every rank, from the job's
  /// layout alone.
  static std::string unavailable(const Context& ctx);
  /// Collective: every rank of the job calls it together (it connects the groups). Null on every
  /// rank alike, with `why` set, when some node could not map its shared memory. `sequence` (the
  /// owner's, from ContextInternals::next_sequence) names its keys in the generation's store.
  static std::unique_ptr<HierarchicalComm> create(Context& ctx, int64_t sequence, std::string& why);
  ~HierarchicalComm() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void allreduce_sum(at::Tensor& t) override;
  const char* name() const override { return "hierarchical"; }

 private:
  HierarchicalComm(Context& ctx, std::unique_ptr<ShmAllreduce> node);
  void allreduce_steps(at::Tensor& t);  // inside the node, between nodes, inside the node
  int rank_, world_, local_rank_, local_world_;
  std::unique_ptr<ShmAllreduce> node_;           // this node's ranks
  c10::intrusive_ptr<Backend> cross_;            // the ranks of this local rank, one per node
  std::unique_ptr<GroupHookComm> flat_;          // dtypes the shared memory cannot sum
  std::unique_ptr<GroupHookComm> cross_compressed_;  // half and bfloat16 between nodes (bf16: a ring)
  // After a failed step every later call fails at once: a rank that skipped the rest of a failed
  // bucket must not start the next one's steps, which its peers would meet as the old one's.
  std::string failed_;
};

}  // namespace cohort::detail
