// ShmAllreduce: allreduce (sum) through shared memory for the ranks of a job that all run on one
// machine — memcpy speed instead of Gloo's TCP ring over loopback, which copies every byte
// through the kernel twice (measured: docs/BENCHMARKS.md).
//
// Layout: one shared segment, two buffers (alternating chunks) of `world` slots each. A chunk:
//   1. rank r copies its chunk into its slot r;            barrier
//   2. rank r sums segment r of the chunk over all slots, in rank order, into slot r's segment r;
//                                                          barrier
//   3. rank r copies every slot k's segment k into its tensor.
// Allgather (allgather_async) uses the same slots with one barrier a chunk: rank r copies the next
// piece of its own part into slot r; barrier; it copies every other slot into the other ranks'
// parts. Per rank that moves the part once in and the other W-1 parts once out (n bytes in all),
// against ~4n for "zero the others' parts, then allreduce".
// Reduce-scatter (reduce_scatter_async) likewise: per chunk rank r copies the next piece of every
// rank's part into slot r; barrier; it sums its own piece over the slots in rank order (the
// allreduce's order, so the result is bitwise the allreduce's slice) straight into its output.
// Double buffering makes a third barrier unnecessary: chunk i+2 reuses chunk i's buffer only after
// every rank passed chunk i+1's first barrier, i.e. finished reading chunk i. Each segment is
// summed by one rank in a fixed order, so every rank gets bitwise the same result.
//
// Barriers spin briefly, then sleep on a futex; a rank whose process dies, or that does not arrive
// within the timeout, makes the others throw CommError (no hang), and so does the agent's word to
// rejoin a new generation (keep_running.h: the peers waited for have left for it). After a failure
// every later operation fails too. Operations run on one background thread in the order
// they were submitted, so ranks that submit in the same order match up.
// Not here: other reductions than sum, dtypes other than float / double, ranks on several machines.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort::detail {

/// A submitted allreduce; wait() rethrows its error.
class ShmPending {
 public:
  void wait();

 private:
  friend class ShmAllreduce;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class ShmAllreduce {
 public:
  /// Ranks whose process a waiting rank watches, so that a peer's death is an error at once.
  static constexpr int kMaxWatchedRanks = 1000;

  /// Every rank of the world calls this together. Returns nullptr on every rank unless every rank
  /// is `eligible` (believes all ranks share its machine) and every rank could map the segment
  /// rank 0 created — so ranks on other machines, or a /dev/shm too small, fall back to the
  /// process group, all alike.
  static std::unique_ptr<ShmAllreduce> create(int rank, int world, bool eligible,
                                              const c10::intrusive_ptr<c10d::Store>& store,
                                              std::chrono::milliseconds timeout, size_t slot_bytes);
  ~ShmAllreduce();

  /// Whether this engine can reduce `t` (CPU, contiguous, float or double).
  static bool supports(const at::Tensor& t);
  /// Sums `t` over all ranks in place, asynchronously, and multiplies the sum by `scale` in the
  /// same pass (DDP's 1/world averaging costs no extra pass over the bucket). The operation is
  /// recorded in the flight recorder as "allreduce of <what> <index>" (`what`: a string literal).
  /// `gradient`: a gradient reduction (the monitor's comm_s counts its time in flight).
  std::shared_ptr<ShmPending> allreduce_async(at::Tensor t, double scale = 1.0, const char* what = "shm allreduce",
                                              int32_t index = -1, bool gradient = false);
  /// Allgather in place: `full` (supports(), numel divisible by the world size) holds this rank's
  /// part at [rank·n/W, (rank+1)·n/W); afterwards it holds every rank's part. The other parts'
  /// old contents are overwritten, never read. Bitwise copies, so every rank ends with the same
  /// bytes. Recorded in the flight recorder as "allgather of <what> <index>".
  std::shared_ptr<ShmPending> allgather_async(at::Tensor full, const char* what = "shm allgather", int32_t index = -1);
  /// Reduce-scatter: `out` (n/W elements) = scale × (sum over ranks of `flat`)[rank's part]. Both
  /// supports(); `out` may be `flat`'s own part. Bitwise allreduce_async(flat, scale)'s slice.
  std::shared_ptr<ShmPending> reduce_scatter_async(at::Tensor flat, at::Tensor out, double scale = 1.0,
                                                   const char* what = "shm reduce-scatter", int32_t index = -1,
                                                   bool gradient = false);

 private:
  struct Control;
  ShmAllreduce(int rank, int world, void* base, size_t bytes, size_t slot_bytes, std::chrono::milliseconds timeout);
  void run();
  struct Op {
    at::Tensor tensor;
    double scale = 1.0;
    std::shared_ptr<ShmPending> pending;
    uint64_t flight_seq = 0;  // its flight-recorder entry
    bool gather = false;      // allgather instead of allreduce
    at::Tensor out;           // defined: reduce-scatter into it
  };
  /// Queues `op` for the engine's thread; returns the result to wait for (op.pending is set here).
  std::shared_ptr<ShmPending> submit(Op op);
  void allreduce_now(Op& op);
  template <typename T>
  void allreduce_typed(T* data, size_t n, T scale);
  void allgather_bytes(unsigned char* data, size_t part_bytes);
  template <typename T>
  void reduce_scatter_typed(const T* data, T* out, size_t part, T scale);
  void barrier();
  void check_peers_alive();

  int rank_;
  int world_;
  void* base_;
  size_t bytes_;
  size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  Control* control_;
  unsigned char* buffers_;
  uint64_t chunk_counter_ = 0;
  std::vector<bool> seen_alive_;  // used by the operations thread only
  // The first failure (operations thread only): the segment's counters are then in an unknown
  // state, so every later operation fails with it rather than pass a barrier it does not share
  // with its peers (they would go on out of step, into the next bucket's collectives).
  std::exception_ptr broken_;
  int rejoin_seen_ = -1;  // the agent's newest rejoin generation when this segment was made

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::detail
