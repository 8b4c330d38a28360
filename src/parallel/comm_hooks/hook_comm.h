// GroupHookComm: the collectives a DDP communication hook calls (cohort/comm_hook.h), internal.
//
// allreduce_sum picks, per tensor, the same path on every rank (it depends only on the tensor's
// dtype and the job): nothing for a world of one; the shared-memory engine for float/double when
// every rank shares the machine; a ring of send/recv for bf16 on Gloo (torch 1.13's Gloo cannot
// sum bf16; the ring sums in bf16, as a backend would); the process group otherwise (fp16 on
// Gloo, everything on NCCL). Every call is in the flight recorder as a gradient reduction, so the
// monitor's comm_bytes and compression count what went on the wire.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>

#include "cohort/comm_hook.h"
#include "cohort/torch_compat.h"
#include "runtime/host/shm_allreduce.h"

namespace cohort::detail {

/// Waits for `work`; a failure becomes the CommError "DDP <what> failed; a peer may have died ...".
void wait_for(WorkHandle& work, int rank, const char* what);

/// `t` as one flat tensor whose length divides by `parts`: a view of `t` where it already does,
/// else a zero-padded copy (copy_back then writes the first t.numel() elements into `t`).
struct PaddedFlat {
  at::Tensor flat;
  int64_t chunk = 0;  // flat.numel() / parts
  void copy_back(at::Tensor& t) const;
  static PaddedFlat of(const at::Tensor& t, int parts);
};

/// What DDP needs of the collectives it hands its hook.
class ReducerComm : public HookComm {
 public:
  /// The bucket the calls belong to (flight-recorder index); set before each hook call.
  void set_bucket(int index) { bucket_ = index; }
  /// Bytes summed since construction (what this rank put on the wire for its hooks).
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  /// Bytes of the buckets' tensors the hooks handed to allreduce_sum since construction, the used
  /// flags' sum not counted: the hooks' own output, whatever path carries it (with the bytes handed
  /// to the hooks, their compression; the hierarchical path's steps inside a node are not on a wire).
  int64_t handed() const { return handed_.load(std::memory_order_relaxed); }
  /// "flat" or "hierarchical": DDP's settings line, compared across ranks.
  virtual const char* name() const = 0;

 protected:
  /// allreduce_sum's precondition, the same message for every implementation.
  void check_contiguous(const at::Tensor& t) const;
  void note_handed(const at::Tensor& t) {
    if (bucket_ >= 0) handed_.fetch_add(static_cast<int64_t>(t.nbytes()), std::memory_order_relaxed);
  }
  int bucket_ = -1;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> handed_{0};
};

class GroupHookComm final : public ReducerComm {
 public:
  /// `what` names the calls in the flight recorder (hang diagnostics). `world` is `group`'s size;
  /// `position` this rank's place in it where the group is not the job's (the hierarchical
  /// allreduce's group between nodes), else -1: `rank`, the job's rank, which errors name.
  GroupHookComm(c10::intrusive_ptr<Backend> group, ShmAllreduce* shm, int rank, int world, const char* what = "ddp hook",
                int position = -1)
      : group_(std::move(group)), shm_(shm), rank_(rank), position_(position < 0 ? rank : position), world_(world), what_(what) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void allreduce_sum(at::Tensor& t) override;
  const char* name() const override { return "flat"; }

 private:
  void ring_allreduce(at::Tensor& t);
  c10::intrusive_ptr<Backend> group_;
  ShmAllreduce* shm_;
  int rank_;
  int position_;
  int world_;
  const char* what_;
  uint32_t ring_calls_ = 0;  // ring tags: the same sequence on every rank
};

}  // namespace cohort::detail
