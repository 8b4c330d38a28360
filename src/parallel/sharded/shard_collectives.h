// The two collectives sharded data parallel needs, each with the implementations this machine's
// libtorch allows, chosen once at construction (the same on every rank). Internal.
//
//   reduce_scatter_avg(flat, out): out = (sum over ranks of flat)[rank's chunk] / W
//     ring            send/recv ring (ring_reduce_scatter.h): (W-1)/W·n bytes each way per rank
//     allreduce_slice allreduce of all n (shared memory when the ranks share a machine, else the
//                     backend), then the own chunk: more bytes, but the shared-memory engine moves
//                     them at memory speed
//     native          the backend's _reduce_scatter_base (NCCL)
//   allgather(shard, full): every rank's shard into its place in full
//     backend         the process group's allgather (Gloo: through TCP, plus a copy in and out)
//     shm             copy the own shard into shared memory, the others' out (ShmAllreduce::allgather_async)
//     shm_allreduce   zero full, write the own shard, sum over ranks in shared memory (the slower
//                     reference the shm path is tested against)
//     native          the backend's _allgather_base (NCCL)
// docs/sharded.md lists the measured speeds that set the `automatic` choices.
// Every collective is recorded in the flight recorder (the shared-memory engine records its own),
// which gives the monitor its bytes and communication time.
#pragma once

#include <torch/torch.h>

#include <string>

#include "cohort/sharded_data_parallel.h"
#include "cohort/torch_compat.h"
#include "runtime/host/shm_allreduce.h"

namespace cohort::detail {

class ShardCollectives {
 public:
  /// Throws ConfigError (on every rank alike) for an algorithm this job cannot run.
  ShardCollectives(c10::intrusive_ptr<Backend> group, ShmAllreduce* shm, int rank, int world,
                   ReduceScatterAlgo rs, AllgatherAlgo ag);

  /// Blocking; call from the CommQueue thread only (ordering). `flat` is scratch afterwards.
  void reduce_scatter_avg(torch::Tensor flat, torch::Tensor out);
  void allgather(torch::Tensor shard, torch::Tensor full);
  /// Sum over ranks, in place (gradient norms, level 1's gradients). `scale` multiplies the sum.
  /// `gradient`: a gradient reduction (the monitor's comm_s counts its time in flight).
  void allreduce(torch::Tensor t, double scale = 1.0, bool gradient = true);

  ReduceScatterAlgo reduce_scatter_algo() const { return rs_; }
  AllgatherAlgo allgather_algo() const { return ag_; }
  static std::string name(ReduceScatterAlgo a);
  static std::string name(AllgatherAlgo a);

 private:
  void wait(WorkHandle work, const char* what);
  c10::intrusive_ptr<Backend> group_;
  ShmAllreduce* shm_;
  int rank_, world_;
  ReduceScatterAlgo rs_;
  AllgatherAlgo ag_;
  bool native_ag_ = false;
  uint32_t tag_ = 0;
};

}  // namespace cohort::detail
