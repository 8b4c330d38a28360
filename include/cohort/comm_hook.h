// cohort/comm_hook.h — how DistributedDataParallel averages a bucket of gradients, replaceable.
//
//   cohort::DDPOptions options;
//   cohort::PowerSGDOptions powersgd;
//   powersgd.rank = 4;
//   options.comm_hook = cohort::powersgd_hook(powersgd);  // or cohort::fp16_compress_hook()
//   auto model = cohort::DistributedDataParallel(Net(), ctx, options);
//
// PyTorch's DDP communication hooks, in C++. A hook receives each bucket as backward fills it (its
// gradients flattened, this rank's sums) and returns the average over the world. It runs on DDP's
// communication thread, one bucket after the other, in bucket order on every rank, while backward
// goes on: its collectives (HookComm, blocking) overlap the rest of backward, as the built-in
// allreduce does. DDP checks what comes back (size, dtype: a ConfigError naming the rank and the
// bucket) and writes it into the parameters' gradients before backward returns.
//
// Every rank must use the same hook with the same settings: construction compares describe()
// across ranks, like the model (a ConfigError on every rank, not a silent wrong average).
// Built in (docs/communication.md):
//   fp16_compress_hook / bf16_compress_hook  half the bytes on the wire: divide by the world size
//       in float (the sum of W halves cannot overflow where each gradient fits), cast, allreduce,
//       cast back into the bucket;
//   powersgd_hook  PyTorch's PowerSGD (Vogels et al. 2019): plain allreduce for the first
//       start_step steps, then each matrix-shaped gradient M (n x m) as P Q^T of rank r — two
//       small allreduces (P: n x r, Q: m x r) with error feedback and warm-started Q; gradients
//       that would not shrink by min_compression_rate (biases, 1-D tensors) allreduced as they are.
#pragma once

#include <ATen/core/Tensor.h>

#include "cohort/sharded_state.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cohort {

/// One bucket as a hook sees it.
struct GradBucket {
  int index = 0;                        ///< the same bucket number on every rank
  at::Tensor buffer;                    ///< 1-D: this rank's gradients of the bucket, flattened
  std::vector<at::Tensor> gradients;    ///< views of buffer, one per parameter, in its shape
  std::vector<std::string> names;       ///< the parameters' names
  bool is_last = false;                 ///< the last bucket of this backward pass
};

/// The collectives a hook may call, over the job's process group for the bucket's device (and
/// shared memory where every rank shares the machine). Blocking; call them from the hook only.
/// Their bytes are the step's bytes on the wire (cohort::monitor(): comm_bytes, compression).
class HookComm {
 public:
  virtual ~HookComm() = default;
  /// This process's rank in the job.
  virtual int rank() const = 0;
  /// The number of ranks in the job.
  virtual int world_size() const = 0;
  /// Sums `t` (contiguous) over every rank, in place; every rank gets bitwise the same result.
  /// Float, double, fp16 and bf16 (summed by a ring of our own where the backend cannot).
  virtual void allreduce_sum(at::Tensor& t) = 0;
};

/// How DistributedDataParallel averages a bucket of gradients (DDPOptions::comm_hook): one of the
/// built-in hooks (fp16_compress_hook(), bf16_compress_hook(), powersgd_hook()) or your own.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Name and settings, e.g. "powersgd(rank=4, start_step=10, ...)"; compared across ranks.
  virtual std::string describe() const = 0;
  /// Called once at construction with the buckets (gradients zero): throw cohort::ConfigError
  /// naming `rank` for a bucket this hook cannot handle. Every rank has the same buckets.
  virtual void check(const std::vector<GradBucket>& buckets, int rank) const {
    (void)buckets;
    (void)rank;
  }
  /// The average of bucket.buffer over the world: a tensor of the buffer's size and dtype (the
  /// buffer itself, written in place, is fine).
  virtual at::Tensor run(GradBucket& bucket, HookComm& comm) = 0;
  /// What this rank's hook remembers between steps, for checkpoints (the Checkpointer saves it
  /// per rank through DistributedDataParallel). Default: nothing.
  virtual RankState state() const { return {}; }
  /// Takes back state() as saved: by this rank (`same_world`), or by a rank of a job of another
  /// size; `saved` is empty when the checkpoint holds none. Throw (any std::exception) for state
  /// this hook cannot use: the restore fails with a CheckpointError naming the rank.
  virtual void load_state(const RankState& saved, bool same_world) {
    (void)saved;
    (void)same_world;
  }
};

/// fp16 on the wire. Gradients beyond fp16's range (about 65504 after dividing by the world
/// size) become inf: the monitor's NaN policy then sees them.
std::shared_ptr<CommHook> fp16_compress_hook();
/// bf16 on the wire: float's range, 8 bits of mantissa.
std::shared_ptr<CommHook> bf16_compress_hook();

/// Settings of powersgd_hook(); every rank must use the same (describe() names them).
struct PowerSGDOptions {
  /// r: columns of P and Q (PyTorch's matrix_approximation_rank). At least 1, and at most the
  /// smaller side of every matrix-shaped gradient (checked at construction).
  int rank = 1;
  /// Plain allreduce for the first steps (PyTorch's start_powerSGD_iter; its default is 1,000).
  int64_t start_step = 1000;
  /// A gradient is compressed only when (n + m) r · this < n m.
  double min_compression_rate = 2;
  /// Add last step's compression error to this step's gradients before compressing.
  bool error_feedback = true;
  /// Start each step's power iteration from last step's Q (else from fresh random values).
  bool warm_start = true;
  /// Seeds the random initial Qs (the same on every rank).
  uint64_t seed = 0;
};

/// PyTorch's powerSGD_hook. Its state (error feedback, Qs, the step count, the seeds) lives in the
/// hook, per rank, and checkpoints keep it: a restart on the same world size goes on bitwise; on
/// another, it keeps the step count and the Qs (the same on every rank) and starts the error
/// feedback from zero (each rank's own residual has no meaning in the new split of the data).
/// One deliberate difference: an all-zero gradient (an unused parameter) gives zeros, not NaN.
std::shared_ptr<CommHook> powersgd_hook(PowerSGDOptions options = {});

/// "none" (nullptr: the built-in allreduce), "fp16", "bf16", "powersgd" (with `powersgd`), for
/// command-line flags. Throws std::invalid_argument naming the choices for anything else.
std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name, const PowerSGDOptions& powersgd = {});

}  // namespace cohort
