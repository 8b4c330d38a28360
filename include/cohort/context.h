// cohort/context.h — joining a job: cohort::init() and the Context it returns.
//
// init() reads where this process sits in the job (job_env.h), connects to the job's c10d TCPStore
// (rank 0 hosts it), and builds the c10d process groups: Gloo for CPU tensors, NCCL for CUDA tensors
// where the libtorch has CUDA. A world of one gets a store in memory and the same groups, so that
// code paths stay the same with and without peers.
// Not here: restarts and heartbeats (the launcher's agent), collectives of our own (parallel/).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "cohort/job_env.h"
#include "cohort/torch_compat.h"

namespace cohort {

/// Settings of cohort::init(); each has an environment variable that overrides it.
struct InitOptions {
  /// How long to wait for the store (rank 0 listening, all ranks joined). COHORT_STORE_TIMEOUT_S
  /// in the environment overrides it.
  std::chrono::milliseconds store_timeout{std::chrono::seconds(30)};
  /// How long one collective may take before it fails. COHORT_COLLECTIVE_TIMEOUT_S overrides it.
  std::chrono::milliseconds collective_timeout{std::chrono::seconds(300)};
  /// Intra-op threads for this process; 0 keeps libtorch's choice. COHORT_THREADS overrides it.
  int threads = 0;
  /// When every rank runs on this machine, reduce CPU gradients through shared memory instead of
  /// Gloo's TCP loopback (falls back to Gloo when /dev/shm is too small). COHORT_SHM=0 turns it off.
  bool shm_allreduce = true;
  /// Bytes per rank and chunk of the shared-memory allreduce. COHORT_SHM_SLOT_MB overrides it.
  size_t shm_slot_bytes = 4u << 20;
  /// Keep the memory each step frees for the next step instead of returning it to the kernel
  /// (cohort::retain_freed_memory(), memory_reuse.h): no page faults for activations and gradients
  /// every step. COHORT_RETAIN_FREED_MEMORY=0 turns it off; so does setting malloc's thresholds in
  /// the environment. Turn it off where resident memory must follow live memory.
  bool retain_freed_memory = true;
};

namespace detail {
class ShmAllreduce;        // cohort's own allreduce through shared memory (src/runtime/)
struct ContextInternals;   // cohort's access to it and to object numbering (src/runtime/)
}  // namespace detail

/// A joined job: this process's place in it, the job's store and its process groups. cohort::init()
/// builds it; the wrappers, the sampler and the Checkpointer take the shared pointer.
class Context {
 public:
  /// Builds the process groups over `store` as rank env.rank of env.world_size (collective: every
  /// rank constructs its own); init() calls it after reading the environment and connecting the
  /// store. Throws CommError when the Gloo group cannot connect to the other ranks, TimeoutError
  /// when not every rank sets up the shared-memory allreduce within options.collective_timeout.
  Context(JobEnv env, c10::intrusive_ptr<c10d::Store> store, const InitOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// This process's rank in the job, 0 to world_size() - 1.
  int rank() const { return env_.rank; }
  /// The number of ranks (processes) in the job.
  int world_size() const { return env_.world_size; }
  /// This rank's number among the ranks on its machine.
  int local_rank() const { return env_.local_rank; }
  /// The number of ranks on this machine.
  int local_world_size() const { return env_.local_world_size; }
  /// Whether this is rank 0.
  bool is_main() const { return env_.rank == 0; }
  /// Where this process sits in the job (job_env.h).
  const JobEnv& env() const { return env_; }
  /// The options the job was joined with (from init(): after the environment's overrides).
  const InitOptions& options() const { return options_; }

  /// The job's key-value store (c10d TCPStore, or an in-memory store for a world of one).
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  /// The process group for tensors on `device`: Gloo for CPU, NCCL for CUDA. Throws ConfigError
  /// when this libtorch has no backend for that device.
  const c10::intrusive_ptr<Backend>& group(const c10::Device& device) const;
  /// The CPU (Gloo) process group.
  const c10::intrusive_ptr<Backend>& group() const { return group(c10::Device(c10::kCPU)); }

  /// The device this rank trains on: the CPU for kCPU; for kCUDA the CUDA device local_rank (modulo
  /// the devices visible), as torchrun users pick it. Throws ConfigError — one line naming the rank
  /// — where this libtorch was built without CUDA or this machine has no CUDA device.
  c10::Device device(c10::DeviceType type) const;

  /// Waits until every rank reaches this point (collective on the CPU group).
  void barrier();

  /// How many times this job's process groups were re-formed around a replaced worker while this
  /// process kept running (keep_running.h); 0 until a peer fails.
  int generation() const { return env_.generation; }
  /// Re-forms the process groups for `generation`, after a peer failed and the agent started its
  /// replacement: the old groups are abandoned (closed in the background), new ones are built
  /// under the generation's store prefix with the same ranks, and every cohort object made on this
  /// Context (DDP, Checkpointer) reconnects, in the order they were made — the order the
  /// replacement makes them in. keep_running() calls it; throws CommError when the groups do not
  /// form (the replacement never came).
  void rejoin(int generation);

 private:
  friend struct detail::ContextInternals;
  void connect_groups();
  // The store the current generation's groups meet in (a prefix of the job's store after a rejoin).
  c10::intrusive_ptr<c10d::Store> generation_store() const;
  JobEnv env_;
  InitOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Backend> cpu_group_;
  mutable c10::intrusive_ptr<Backend> cuda_group_;  // created on first use
  std::unique_ptr<detail::ShmAllreduce> shm_;
  std::atomic<int64_t> sequence_{0};
  // Objects that reconnect after a rejoin, by registration number (ContextInternals): what each
  // lets go of the old groups first, and how it reconnects to the new ones.
  struct RejoinListener {
    std::string what;  // the object, for a rejoin that takes long (rejoin_watch.h)
    std::function<void()> release, reconnect;
  };
  std::map<int64_t, RejoinListener> rejoin_listeners_;
  int64_t next_listener_ = 0;
  std::vector<std::unique_ptr<detail::ShmAllreduce>> retired_shm_;  // mapped until the end: an old reducer may hold one
  // The current generation's subgroups (make_cpu_subgroup), abandoned with the world group at a rejoin.
  mutable std::mutex subgroups_mutex_;
  mutable std::vector<c10::weak_intrusive_ptr<Backend>> subgroups_;
};

/// Joins the job described by the environment (see job_env.h). Throws ConfigError for a bad
/// environment and TimeoutError when the store cannot be reached within options.store_timeout.
std::shared_ptr<Context> init(InitOptions options = {});

}  // namespace cohort
