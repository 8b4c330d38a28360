// The Checkpointer's inside, shared by the files that implement it (checkpointer.cpp says which
// does what). Internal header.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <future>
#include <vector>

#include "checkpoint/format/manifest.h"
#include "checkpoint/format/rank_state_file.h"
#include "checkpoint/format/training_state.h"
#include "checkpoint/snapshots/buddy_copies.h"
#include "checkpoint/storage/mapped_files.h"
#include "cohort/checkpointer.h"
#include "cohort/context.h"
#include "monitor/worker_monitor.h"
#include "parallel/comm_queue.h"

namespace cohort {

/// One save from its capture to its commit.
struct SaveJob {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // saves of this Checkpointer so far (in this generation): keys the store entries
  int generation = 0;  // the Context's generation at the capture (keep_running.h): keys them too
  ckpt::NamedTensors model, optimizer;  // rank 0: staged copies
  ckpt::NamedTensors shard;             // sharded state: this rank's shard, every rank
  bool sharded = false;
  bool has_rank_state = false;  // a RankStateCheckpointable's state: every rank writes its own
  ckpt::NamedTensors rank_tensors;
  std::string rank_text;
  std::string sharding_json;  // sharded state: the layout for the manifest
  // A model on a device mesh (mesh_checkpoint.h): this rank's pieces (checkpoint/sharded/mesh_state.h),
  // which its part carries to rank 0, and the mesh; rank 0 merges every rank's into sharding_json.
  bool mesh = false;
  std::string mesh_pieces, mesh_json;
  std::string optimizer_json, sampler_json;
  ckpt::RankRng rng;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> user;        // Stateful objects' state_dict() (rank 0 writes it)
  // Snapshots: files whose bytes the capture copied straight into their pages (mapped_files.h),
  // by name; their tensors above stay empty. The writer commits them as they are.
  std::vector<std::pair<std::string, const ckpt::Mapping*>> mapped;
  std::chrono::steady_clock::time_point started;  // the save began (the monitor's event reports its duration)
};

class Checkpointer::Impl {
 public:
  using NamedTensors = ckpt::NamedTensors;

  explicit Impl(Checkpointer& owner) : owner_(owner), ctx_(*owner.ctx_), rank_(ctx_.rank()) {}
  ~Impl();

  // --- capture (save_capture.cpp): the caller's thread ------------------------------------------
  // `copy`: async saves copy into staging memory; a synchronous save writes from the live tensors
  // (made CPU-contiguous only where they are not), since training waits for it anyway.
  SaveJob capture(const TrainingState& state, bool copy);
  static NamedTensors cpu_contiguous(const NamedTensors& live);
  // Copies into CPU buffers reused from the previous save when the layout is the same, so an async
  // save costs one memcpy per byte and no page faults after the first.
  NamedTensors stage(const NamedTensors& live, std::vector<at::Tensor>& buffers);
  // The capture is the only part of an async save that blocks training, and it is bound by memory
  // bandwidth: one thread reaches about 8 GB/s here, all cores together more. Training waits
  // anyway, so every core copies a share of the bytes.
  struct CopySlice {
    char* dst;
    const char* src;
    size_t bytes;
  };
  static void parallel_copy(const std::vector<CopySlice>& slices);
  // Snapshots: `live` (when there are tensors) copied into the mapped pages of the file `name`
  // will be (the retired file of that name in spare_dir(), taken over), recorded in job.mapped;
  // returns no tensors then.
  // Where the file cannot be mapped (a full file system, one without fallocate), stage() instead:
  // the writer then writes the file, and a full file system fails there as for any checkpoint.
  NamedTensors map_or_stage(const std::string& name, const NamedTensors& live, std::vector<at::Tensor>& buffers,
                            SaveJob& job);
  bool map_into_file(const std::string& name, const NamedTensors& live, SaveJob& job);
  std::string per_rank_name(const char* kind) const { return ckpt::per_rank_file_name(kind, rank_, ctx_.world_size()); }

  // --- write (save_write.cpp): the background writer, or the caller for synchronous saves --------
  void write_and_commit(const SaveJob& job);
  /// Whether this rank writes files for `job` (else its whole share is the part it reports).
  bool writes_files(const SaveJob& job) const;
  /// What this rank reports to rank 0 for `job`: its RNG state and its own state's text.
  nlohmann::json part_of(const SaveJob& job) const;
  std::vector<ckpt::ManifestFile> write_files(const SaveJob& job, const std::string& path);
  void start(SaveJob job);
  bool busy() const {
    return writing_.valid() && writing_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  }
  /// Waits for the save in flight; returns its error message (empty when it succeeded or none ran).
  std::string join();
  /// Collects a finished save's result without waiting for one still running.
  std::string reap_if_finished() { return writing_.valid() && !busy() ? join() : std::string(); }

  // --- commit (save_commit.cpp): every rank's part through the store, rank 0's manifest ----------
  std::string key(const SaveJob& job, int rank) const { return key(job.generation, job.index, rank); }
  std::string key(int generation, int64_t index, int rank) const;
  // Throws CommError when the agent asked this process to rejoin a generation after `generation`
  // (keep_running.h): the step being saved does not count, so this rank goes back as few steps as
  // the others.
  void stop_if_job_reforms(int generation) const;
  void report(const SaveJob& job, const nlohmann::json& part);
  void commit(const SaveJob& job, const std::string& path, std::vector<ckpt::ManifestFile> files);
  // Every rank's part, in rank order. A part that fails authentication (commit_parts.h) was written
  // by someone outside the job: it is never used, and the key is read again until the rank's own
  // part replaces it (a rank's set overwrites one made ahead of it) or the commit timeout passes.
  // Deleting the forged value instead could delete the rank's part set a moment later.
  std::vector<nlohmann::json> collect_parts(const SaveJob& job);
  // The writer thread talks to the store over its own connection: the job's TCPStore client is
  // the main thread's, and a commit may wait on it for minutes.
  c10::intrusive_ptr<c10d::Store>& store();
  void retire_old();
  // Snapshots: this rank's retired files wait in a directory of their own (not a step-*: nothing
  // lists or restores it) for the next snapshot to overwrite them in place. On tmpfs the pages are
  // the storage: a snapshot every step then allocates, zeroes and frees none (AtomicWriter's reuse).
  std::string spare_dir(int rank) const { return owner_.dir_ + "/.spare-" + std::to_string(rank); }
  std::string spare_dir() const { return spare_dir(rank_); }
  // The names of the files rank `rank` writes into a save (the replicated files it writes; its
  // shard or rank-state file). This rank's own, or (snapshots on one machine, where rank 0 retires
  // every rank's files into its spare directory) another rank's.
  std::vector<std::string> file_names_of(int rank) const;
  std::vector<std::string> own_file_names() const { return file_names_of(rank_); }
  // Snapshots on one machine: the replicated files are split between ranks 0 and 1, rank 0 the
  // model, rank 1 the optimizer state (the same bytes on every rank of a data-parallel job). The
  // ranks meet at every allreduce, so a capture that copied both files on rank 0 while rank 1 had
  // nothing to copy was all rank 1's idle time; split, each copies about half (docs/BENCHMARKS.md).
  bool split_replicated_ = false;
  bool writes_optimizer() const { return split_replicated_ ? rank_ == 1 : writes_replicated_; }
  // Snapshots on several machines, each machine's copy (snapshot_sharing.h): rank 0 commits as
  // always and hands its manifest to the other machines' writers through the store, sealed like
  // the parts (a manifest carries the sampler, optimizer and RNG state, which restore applies as
  // they are); each writes it beside its own copy of the same bytes.
  std::string manifest_key(const SaveJob& job) const { return key(job, 0) + "/manifest"; }
  void publish_manifest(const SaveJob& job, const std::string& text);
  void adopt_manifest(const SaveJob& job, const std::string& path);
  // At most one step lost (snapshots): a rank goes past step N only once the snapshot of the step
  // before is committed, else a peer killed between the step's last collective and rank 0's commit
  // would leave the survivors a step further ahead than the newest snapshot. Rank 0's writer marks
  // each snapshot done (committed or failed) in the store; the other ranks wait for the previous
  // one's mark before they capture a snapshot (rank 0's writer join already waits).
  std::string done_key(int generation, int64_t index) const { return key(generation, index, 0) + "/done"; }
  void mark_snapshot_done(const SaveJob& job);
  int64_t parts_complete_ = -1;  // the newest save (index) whose every part came (the writer's)
  int64_t oldest_done_mark_ = 0;  // done marks from this index on may still be in the store
  void wait_previous_snapshot(const SaveJob& job);

  // --- in-memory snapshots (checkpointer_snapshots.cpp, snapshots.h) -----------------------------
  // The inner Checkpointer for the job's snapshot directory, when snapshots are asked for and every
  // rank has one (the ranks agree: a rank that saved alone would leave rank 0 waiting for its part).
  void open_snapshots();
  int64_t agree_on_snapshots(const std::string& dir, const std::string& why_none);
  // State that only its own rank holds (shards, PowerSGD's errors) is copied to a buddy machine
  // (buddy_copies.h); where a job of several machines has no buddies (uneven machines, no Gloo)
  // it would be on one machine only, and such a job keeps to disk.
  bool per_rank_state_without_buddies(const TrainingState& state);
  // Snapshots with per-rank files on several machines: this rank's go to its buddy, its buddy's
  // owner's come here (on the writer thread). Empty when done; else the problem for the part.
  std::string copy_to_buddies(const SaveJob& job, const std::string& path, const std::vector<ckpt::ManifestFile>& files);
  // Starts a snapshot of this step when one is due. It waits for the previous one to be committed
  // first: so the newest committed snapshot is never more than one step behind. A failure costs
  // that snapshot only (a warning); the disk checkpoints are untouched.
  void maybe_snapshot(const TrainingState& state);
  void wait_for_snapshot();

  // --- after a peer's failure (keep_running.h, checkpointer_snapshots.cpp) ---------------------------
  // The save in flight is given up (rank 0 stops waiting for the lost rank's part; a part that came
  // is still committed), the save count starts again with the new generation's keys, and the
  // constructor's agreements are made again: the replacement's constructor makes them now.
  void release();    // the save in flight given up, the buddies' old group dropped
  void reconnect();  // the constructor's agreements again
  std::atomic<bool> abandon_{false};  // the writer stops waiting for parts
  int64_t rejoin_listener_ = -1;

  Checkpointer& owner_;
  Context& ctx_;
  const int rank_;
  int64_t sequence_ = 0;
  int64_t saves_started_ = 0;
  std::atomic<int64_t> committed_{0};
  // The monitor current when the Checkpointer was made: commits may run on the writer thread.
  detail::StepMonitor* monitor_ = &detail::current_step_monitor();
  std::vector<at::Tensor> staged_model_, staged_optim_, staged_shard_, staged_rank_;
  ckpt::FileMappings mappings_{rank_};  // snapshots: the files the captures copy into
  c10::intrusive_ptr<c10d::Store> store_;
  std::string own_part_;
  // The async saves' writer: one thread kept for the Checkpointer's life, made at its first async
  // save. A thread started per save cost a snapshot every step its start (~0.08 ms of the
  // training thread's step, measured) on each rank that writes.
  std::unique_ptr<detail::CommQueue> writer_;
  std::shared_future<void> writing_;  // the save in flight, until join()
  mutable std::mutex mutex_;
  std::string pending_error_;
  std::string last_error_;
  std::chrono::steady_clock::time_point last_save_ = std::chrono::steady_clock::now();
  std::unique_ptr<Checkpointer> snapshots_;  // in-memory snapshots, when asked for and possible
  bool is_snapshots_ = false;                // this is a snapshot Checkpointer (no monitor events)
  std::string program_;                      // snapshots: this program's identity, in the manifests written
  bool writes_replicated_ = rank_ == 0;      // writes the replicated files (snapshots: each machine's first rank)
  int64_t other_copies_ = 0;                 // snapshots: machines other than rank 0's that keep a copy
  bool per_rank_noted_ = false;              // said once why a job of several machines takes no snapshots
  ckpt::Buddies buddies_;                    // snapshots on several machines: who keeps whose per-rank files
};

}  // namespace cohort
