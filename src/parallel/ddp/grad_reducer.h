// GradReducer: averages gradients over the world during backward (internal to DDP).
//
// Flush rule (the one thing to know): parameters are grouped into buckets at construction, in
// reverse registration order (roughly the order backward produces gradients); a bucket is
// launched (asynchronous allreduce) when the hooks of all its parameters have fired AND every
// earlier bucket has been launched, so every rank launches the same buckets in the same order.
// At the end of backward (an autograd engine callback queued by the first hook), incomplete
// buckets are filled with zeros for the missing gradients, launched, and all buckets are waited
// for; then averaged gradients are written back. Each bucket carries one "used" flag per
// parameter, summed with the gradients, so that a parameter no rank used keeps its gradient.
//
// With a communication hook (DDPOptions::comm_hook, cohort/comm_hook.h) a launched bucket goes to
// the hook on a thread of its own (CommQueue: in bucket order, like every rank), which returns its
// average; the used flags of all buckets follow in one allreduce after the last bucket. Every
// collective of the iteration then comes from that thread, so the order stays the same everywhere.
//
// Reference mode skips buckets: at the end of backward, one allreduce per gradient, in order.
//
// Monitoring (cohort/monitor.h): the end-of-backward callback marks the end of backward compute
// (comm_wait begins) and, once every bucket was waited for, the end of communication (optimizer
// begins). Then the global L2 norm of the averaged gradients is computed from the buckets (the
// same bytes on every rank, so the same norm) and handed to the monitor, whose NaN policy may
// throw AnomalyError (stop) or have every gradient dropped (skip: the optimizer then skips the
// step; the next backward re-aliases the gradients to the buckets).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/torch_compat.h"
#include "parallel/comm_queue.h"
#include "parallel/comm_hooks/hook_comm.h"
#include "monitor/worker_monitor.h"
#include "runtime/host/shm_allreduce.h"

namespace cohort::detail {

class GradReducer : public std::enable_shared_from_this<GradReducer> {
 public:
  struct Param {
    std::string name;
    torch::Tensor tensor;
  };

  /// `shm` (may be null) reduces CPU float buckets through shared memory instead of `group`.
  /// `monitor` (may be null) receives the phase marks and the gradient norm.
  /// `comm` (may be null): the collectives buckets go through instead of `group` (the
  /// hierarchical allreduce), with options.comm_hook or else a plain averaging hook.
  static std::shared_ptr<GradReducer> create(std::vector<Param> params, c10::intrusive_ptr<Backend> group,
                                             ShmAllreduce* shm, int rank, int world_size, const DDPOptions& options,
                                             StepMonitor* monitor = nullptr, std::unique_ptr<ReducerComm> comm = nullptr);
  ~GradReducer();

  void set_sync(bool enabled);
  bool sync_enabled() const;
  DDPStats stats() const;
  std::vector<std::vector<std::string>> bucket_layout() const;

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_, in bucket order
    std::vector<int64_t> offset;  // where each parameter's gradient starts in `flat`
    int64_t numel = 0;            // gradient elements; `flat` has numel + params.size() (used flags)
    torch::Tensor flat;
    torch::Tensor used;           // this rank's used flags (CPU; pinned beside a CUDA flat), copied into flat's tail at launch
    std::vector<torch::Tensor> kept;  // aliased gradients of unused parameters, restored if no rank used them
    size_t pending = 0;           // gradients not yet copied in this iteration
    WorkHandle work;                       // in flight on the process group, or
    std::shared_ptr<ShmPending> shm_work;  // in flight on the shared-memory allreduce
    uint64_t flight_seq = 0;               // work's flight-recorder entry (the shm engine keeps its own)
    std::shared_future<void> hook_work;    // or with the communication hook
  };
  struct Slot {
    size_t bucket = 0;
    size_t index = 0;     // position within its bucket
    bool fired = false;   // hook fired in the current synchronised backward
    bool accumulated = false;  // hook fired in a no_sync backward since the last synchronisation
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: hooks live on it
    uintptr_t hook_key = 0;
  };

  GradReducer(std::vector<Param> params, c10::intrusive_ptr<Backend> group, ShmAllreduce* shm, int rank,
              int world_size, const DDPOptions& options, StepMonitor* monitor, std::unique_ptr<ReducerComm> comm);
  void check_grad_norm(const std::vector<torch::Tensor>& averaged);
  void build_buckets();
  void report_buckets();
  void attach_hooks();
  void on_grad_ready(size_t index);
  void begin_iteration();
  void reset_iteration();
  void copy_into_bucket(size_t index, bool used);
  void launch_ready_buckets(bool from_hook);
  void finish_iteration();
  void finish_reference();
  void wait(Bucket& bucket);
  void wait(WorkHandle& work, const char* what);
  void setup_hook(std::unique_ptr<ReducerComm> comm);
  void launch_hook(size_t k);
  void launch_hook_flags();
  void wait_hook(std::shared_future<void>& work, const std::string& what);

  std::vector<Param> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  c10::intrusive_ptr<Backend> group_;
  ShmAllreduce* shm_;
  int rank_;
  int world_;
  DDPOptions options_;
  StepMonitor* monitor_;
  std::shared_ptr<CommHook> hook_;          // null: the built-in allreduce
  std::vector<GradBucket> hook_buckets_;    // views of the buckets, handed to the hook
  int64_t hook_input_bytes_ = 0;            // their gradient bytes, per synchronised backward
  int64_t hook_handed_seen_ = 0;            // hook_comm_->handed() at the last synchronised backward
  std::unique_ptr<ReducerComm> hook_comm_;
  std::unique_ptr<CommQueue> hook_queue_;   // after what its tasks use: its destructor runs them
  std::shared_future<void> hook_flags_;     // the used flags' allreduce of this iteration

  mutable std::mutex mu_;
  bool sync_ = true;
  bool in_backward_ = false;
  size_t next_bucket_ = 0;
  DDPStats stats_;
};

}  // namespace cohort::detail
