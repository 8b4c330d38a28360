// The Checkpointer: save policy, snapshots, the background writer, the commit across ranks, and
// restore. The file format pieces live in file_io / safetensors / manifest / checkpoint_dir.
//
// One save, as every rank sees it (collective: all ranks make the same calls in the same order):
//   1. snapshot (caller's thread): rank 0 copies the model and optimizer tensors into staging
//      memory kept between saves; every rank records its RNG state.
//   2. write (background thread for async saves): rank 0 writes model.safetensors and
//      optimizer.safetensors into DIR/step-N/ (atomic writer: temporary name, fsync, rename).
//   3. report: every rank puts its part (RNG state, files it wrote, or its error) under a store key
//      for this save.
//   4. commit (rank 0): waits for every rank's part, writes manifest.json atomically, fsyncs the
//      directory; then retention removes old checkpoints.
// Only rank 0 touches the disk for replicated state, so the other ranks' saves cost a few
// microseconds. Sharded state (a module that is a ShardedCheckpointable, i.e. ShardedDataParallel):
// in step 1 every rank snapshots its shard; in step 2 every rank writes
// shard-<rank>-of-<world>.safetensors (role "shard") and rank 0 writes the replicated buffers as
// model.safetensors; in step 3 each rank's part lists its file; the commit adds them to the manifest
// with the layout ("sharding"). Restore reads the replicated files on every rank and lets the module
// cut its own slices out of the saved shard files (resharding to any world size). A replicated
// model whose ranks keep state of their own (a RankStateCheckpointable: DDP with PowerSGD) has
// every rank write its rank-<r>-of-<W> file in step 2 (rank_state_file.h).
// In-memory snapshots (CheckpointOptions::snapshot_every_steps, snapshots.h) are the saves of a
// second, inner Checkpointer into a directory in tmpfs: maybe_save takes one when no checkpoint is
// due, and restore chooses among both directories' saves as among one.
#include "cohort/checkpointer.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "checkpoint/agreement.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/commit_parts.h"
#include "checkpoint/rank_state_file.h"
#include "checkpoint/shard_files.h"
#include "checkpoint/program_identity.h"
#include "checkpoint/snapshot_sharing.h"
#include "checkpoint/snapshots.h"
#include "checkpoint/training_state.h"
#include "cohort/context.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "cohort/sharded_state.h"
#include "monitor/worker_monitor.h"
#include "runtime/log.h"
#include "runtime/check.h"
#include "runtime/context_internals.h"

namespace cohort {
namespace {

using namespace std::chrono;
using ckpt::allreduce_int;
using ckpt::NamedTensors;

int64_t now_unix_ms() { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); }

// The checkpoint root with its parents (mkdir -p), so that "runs/job/checkpoints" works as given.
void make_dirs(const std::string& path, int rank) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw CheckpointError(rank, "could not create directory " + path + ": " + ec.message());
}

void make_dir(const std::string& path, int rank) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    const int err = errno;
    throw CheckpointError(rank, "could not create directory " + path + ": " + std::strerror(err));
  }
}


// Every live Checkpointer's pending save is finished before a normal exit, also one through exit().
std::mutex g_live_mutex;
std::set<Checkpointer*>* g_live = nullptr;

}  // namespace

struct SaveJob {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // saves of this Checkpointer so far: keys the store entries
  NamedTensors model, optimizer;  // rank 0: staged copies
  NamedTensors shard;             // sharded state: this rank's shard, every rank
  bool sharded = false;
  bool has_rank_state = false;    // a RankStateCheckpointable's state: every rank writes its own
  NamedTensors rank_tensors;
  std::string rank_text;
  std::string sharding_json;      // sharded state: the layout for the manifest
  std::string optimizer_json, sampler_json;
  ckpt::RankRng rng;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> user;  // Stateful objects' state_dict() (rank 0 writes it)
  std::chrono::steady_clock::time_point started;  // the save began (the monitor's event reports its duration)
};

class Checkpointer::Impl {
 public:
  Impl(Checkpointer& owner) : owner_(owner), ctx_(*owner.ctx_), rank_(ctx_.rank()) {}

  ~Impl() {
    if (writer_.joinable()) writer_.join();
  }

  // --- snapshot -------------------------------------------------------------------------------
  // `copy`: async saves copy into staging memory; a synchronous save writes from the live tensors
  // (made CPU-contiguous only where they are not), since training waits for it anyway.
  SaveJob snapshot(const TrainingState& state, bool copy) {
    COHORT_CHECK(state.module != nullptr, "TrainingState without a module");
    SaveJob job;
    job.step = owner_.step_;
    job.index = saves_started_++;
    job.started = std::chrono::steady_clock::now();
    job.metadata = owner_.metadata_;
    for (const auto& [name, object] : state.user) {
      COHORT_CHECK(object != nullptr, "TrainingState::user[\"" << name << "\"] is null");
      job.user[name] = object->state_dict();
    }
    if (state.sampler) {
      const SamplerState s = state.sampler->state();
      job.epoch = s.epoch;
      job.sampler_json = s.to_json();
    }
    job.rng = ckpt::capture_rng(*state.module, rank_);
    if (auto* sharded = dynamic_cast<ShardedCheckpointable*>(state.module)) {
      ShardState s = sharded->shard_state(state.optimizer);
      job.sharded = true;
      job.sharding_json = s.layout_json;
      job.shard = copy ? stage(s.tensors, staged_shard_) : cpu_contiguous(s.tensors);
      if (rank_ == 0) {
        job.optimizer_json = s.optimizer_json;
        const auto replicated = sharded->replicated_tensors();
        job.model = copy ? stage(replicated, staged_model_) : cpu_contiguous(replicated);
      }
      return job;
    }
    if (auto* own = dynamic_cast<RankStateCheckpointable*>(state.module)) {
      RankState s = own->rank_state();
      job.has_rank_state = !s.empty();
      job.rank_text = std::move(s.text);
      job.rank_tensors = copy ? stage(s.tensors, staged_rank_) : cpu_contiguous(s.tensors);
    }
    if (writes_replicated_) {  // replicated state: one writer (snapshots: one per machine)
      job.model = ckpt::module_tensors(*state.module);
      if (state.optimizer) job.optimizer = ckpt::optimizer_tensors(*state.optimizer, *state.module, &job.optimizer_json, rank_);
      job.model = copy ? stage(job.model, staged_model_) : cpu_contiguous(job.model);
      job.optimizer = copy ? stage(job.optimizer, staged_optim_) : cpu_contiguous(job.optimizer);
    }
    return job;
  }

  static NamedTensors cpu_contiguous(const NamedTensors& live) {
    NamedTensors out;
    for (const auto& [name, t] : live) out.emplace_back(name, t.detach().to(at::kCPU).contiguous());
    return out;
  }

  // Copies into CPU buffers reused from the previous save when the layout is the same, so an async
  // save costs one memcpy per byte and no page faults after the first.
  NamedTensors stage(const NamedTensors& live, std::vector<at::Tensor>& buffers) {
    torch::NoGradGuard no_grad;
    bool reuse = buffers.size() == live.size();
    for (size_t i = 0; reuse && i < live.size(); ++i)
      reuse = buffers[i].sizes() == live[i].second.sizes() && buffers[i].scalar_type() == live[i].second.scalar_type();
    if (!reuse) {
      buffers.clear();
      for (const auto& [name, t] : live) buffers.push_back(at::empty(t.sizes(), t.options().device(at::kCPU)));
    }
    NamedTensors out;
    std::vector<CopySlice> slices;
    for (size_t i = 0; i < live.size(); ++i) {
      const at::Tensor& t = live[i].second;
      if (t.device().is_cpu() && t.is_contiguous())
        slices.push_back({static_cast<char*>(buffers[i].data_ptr()), static_cast<const char*>(t.data_ptr()), t.nbytes()});
      else
        buffers[i].copy_(t);  // CUDA (device to host) or strided: torch's copy
      out.emplace_back(live[i].first, buffers[i]);
    }
    parallel_copy(slices);
    return out;
  }

  // The snapshot is the only part of an async save that blocks training, and it is bound by memory
  // bandwidth: one thread reaches about 8 GB/s here, all cores together more. Training waits
  // anyway, so every core copies a share of the bytes.
  struct CopySlice {
    char* dst;
    const char* src;
    size_t bytes;
  };
  static void parallel_copy(const std::vector<CopySlice>& slices) {
    size_t total = 0;
    for (const auto& s : slices) total += s.bytes;
    const size_t workers = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), total >> 24));
    const size_t share = (total + workers - 1) / workers;
    auto copy_range = [&](size_t begin, size_t end) {  // bytes [begin, end) of the concatenation
      size_t offset = 0;
      for (const auto& s : slices) {
        const size_t lo = std::max(begin, offset), hi = std::min(end, offset + s.bytes);
        if (lo < hi) std::memcpy(s.dst + (lo - offset), s.src + (lo - offset), hi - lo);
        offset += s.bytes;
      }
    };
    std::vector<std::thread> helpers;
    for (size_t w = 1; w < workers; ++w) helpers.emplace_back(copy_range, w * share, std::min(total, (w + 1) * share));
    copy_range(0, std::min(total, share));
    for (auto& h : helpers) h.join();
  }

  // --- write and commit (background thread or caller) -------------------------------------------
  void write_and_commit(const SaveJob& job) {
    const std::string path = owner_.dir_ + "/" + ckpt::step_dir_name(job.step);
    nlohmann::json part{{"rank", rank_}, {"rng_cpu", job.rng.cpu}, {"rng_cuda", job.rng.cuda}};
    if (job.has_rank_state) part["rank_state"] = job.rank_text;
    std::vector<ckpt::ManifestFile> files;
    try {
      if (writes_replicated_ || job.sharded || job.has_rank_state) files = write_files(job, path);
    } catch (const Error& e) {
      part["error"] = e.what();
      report(job, part);
      throw;
    }
    if (rank_ != 0) {  // shard and rank_state files travel to rank 0 in the part
      auto& listed = part["files"] = nlohmann::json::array();
      for (const auto& f : files)
        if (f.role != "model" && f.role != "optimizer")  // another machine's copy of rank 0's files
          listed.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3", ckpt::to_hex(f.xxh3)}, {"role", f.role}});
    }
    report(job, part);
    if (rank_ == 0) {
      try {
        commit(job, path, std::move(files));
      } catch (const std::exception&) {
        publish_manifest(job, "");  // the other machines' copies stay uncommitted
        throw;
      }
    } else if (writes_replicated_) {
      adopt_manifest(job, path);
    }
  }

  // --- snapshots on several machines: each machine's copy (snapshot_sharing.h) -------------------
  // Rank 0 commits as always and hands its manifest to the other machines' writers through the
  // store, sealed like the parts (a manifest carries the sampler, optimizer and RNG state, which
  // restore applies as they are); each writes it beside its own copy of the same bytes.
  std::string manifest_key(const SaveJob& job) const { return key(job, 0) + "/manifest"; }

  void publish_manifest(const SaveJob& job, const std::string& text) {
    if (other_copies_ == 0) return;
    const std::string k = manifest_key(job);
    const std::string value = ckpt::sealed_part(ctx_.env().job_key, k, ctx_.env().restart_count, {{"manifest", text}});
    store()->set(k, std::vector<uint8_t>(value.begin(), value.end()));
  }

  void adopt_manifest(const SaveJob& job, const std::string& path) {
    const std::string k = manifest_key(job);
    auto& s = store();
    try {
      s->wait({k}, owner_.options_.commit_timeout);
    } catch (const std::exception&) {
      throw CheckpointError(rank_, "snapshot of step " + std::to_string(job.step) + ": rank 0's manifest did not come");
    }
    const auto bytes = s->get(k);
    if (s->add(k + "/read", 1) == other_copies_) {  // the last machine to read it clears it
      s->deleteKey(k);
      s->deleteKey(k + "/read");
    }
    const auto part = ckpt::opened_part(ctx_.env().job_key, k, ctx_.env().restart_count, std::string(bytes.begin(), bytes.end()));
    if (!part) throw CheckpointError(rank_, "snapshot of step " + std::to_string(job.step) + ": a manifest that fails authentication");
    const std::string text = part->value("manifest", "");
    if (text.empty()) throw CheckpointError(rank_, "snapshot of step " + std::to_string(job.step) + " not committed by rank 0");
    ckpt::AtomicWriter manifest(path, ckpt::kManifestName, rank_);
    manifest.write(text.data(), text.size());
    manifest.finish();
    ckpt::fsync_dir(path, rank_);
    retire_old();
  }

  std::vector<ckpt::ManifestFile> write_files(const SaveJob& job, const std::string& path) {
    make_dirs(owner_.dir_, rank_);
    struct stat st {};
    const bool existed = ::stat(path.c_str(), &st) == 0;
    make_dir(path, rank_);
    const std::string shard_name = job.sharded ? ckpt::per_rank_file_name("shard", rank_, ctx_.world_size()) : "";
    const std::string rank_name = job.has_rank_state ? ckpt::per_rank_file_name("rank", rank_, ctx_.world_size()) : "";
    if (existed) {
      // The same step saved before (the job went back to an older checkpoint and got here again):
      // un-commit the old one first, so that nothing mixes old and new files under a manifest.
      if (::unlink((path + "/" + ckpt::kManifestName).c_str()) == 0) ckpt::fsync_dir(path, rank_);
      // A save of this step killed mid-write left temporary files of the names this rank writes
      // (rank 0 also writes the manifest).
      std::vector<std::string> own{shard_name, rank_name};
      if (writes_replicated_) own.insert(own.end(), {"model.safetensors", "optimizer.safetensors", ckpt::kManifestName});
      ckpt::remove_temporaries(path, own);
    }
    // The new directory's entry is durable before its commit (with per-rank files, any rank may have made it).
    if (writes_replicated_ && (!existed || job.sharded || job.has_rank_state)) ckpt::fsync_dir(owner_.dir_, rank_);
    std::vector<ckpt::ManifestFile> files;
    auto add = [&](const ckpt::FileRecord& r, const char* role) {
      ckpt::ManifestFile f;
      static_cast<ckpt::FileRecord&>(f) = r;
      f.rank = rank_;
      f.role = role;
      files.push_back(f);
    };
    const bool direct = !is_snapshots_;  // O_DIRECT on tmpfs only adds the aligned buffers' copies and an I/O thread
    try {
      if (writes_replicated_) {
        add(ckpt::write_tensor_file(path, "model.safetensors", job.model, rank_, direct), "model");
        if (!job.optimizer_json.empty() && !job.sharded)
          add(ckpt::write_tensor_file(path, "optimizer.safetensors", job.optimizer, rank_, direct), "optimizer");
      }
      if (job.sharded) add(ckpt::write_tensor_file(path, shard_name, job.shard, rank_, direct), "shard");
      if (job.has_rank_state) add(ckpt::write_tensor_file(path, rank_name, job.rank_tensors, rank_, direct), "rank_state");
      ckpt::fsync_dir(path, rank_);
    } catch (const Error&) {
      for (const auto& f : files) ::unlink((path + "/" + f.name).c_str());
      ::rmdir(path.c_str());  // only if empty: another rank's part may be there
      throw;
    }
    return files;
  }

  std::string key(const SaveJob& job, int rank) const {
    return "cohort/ckpt/" + std::to_string(sequence_) + "/" + std::to_string(job.index) + "/" + std::to_string(rank);
  }

  void report(const SaveJob& job, const nlohmann::json& part) {
    if (ctx_.world_size() == 1) {
      own_part_ = part.dump();
      return;
    }
    const std::string k = key(job, rank_);
    const std::string value = ckpt::sealed_part(ctx_.env().job_key, k, ctx_.env().restart_count, part);
    store()->set(k, std::vector<uint8_t>(value.begin(), value.end()));
  }

  void commit(const SaveJob& job, const std::string& path, std::vector<ckpt::ManifestFile> files) {
    ckpt::Manifest m;
    m.step = job.step;
    m.epoch = job.epoch;
    m.world_size = ctx_.world_size();
    m.created_unix_ms = now_unix_ms();
    m.sampler_json = job.sampler_json;
    m.optimizer_json = job.optimizer_json;
    m.metadata = job.metadata;
    m.user = job.user;
    m.sharding_json = job.sharding_json;
    m.program = program_;  // snapshots only (program_identity.h)
    for (const auto& part : collect_parts(job)) {
      if (part.contains("error"))
        throw CheckpointError(rank_, "checkpoint " + path + " not committed: " + part["error"].get<std::string>());
      ckpt::RankRng rng;
      rng.rank = part.at("rank").get<int>();
      rng.cpu = part.at("rng_cpu").get<std::string>();
      rng.cuda = part.at("rng_cuda").get<std::vector<std::string>>();
      m.rng.push_back(rng);
      if (part.contains("rank_state")) m.rank_state[rng.rank] = part["rank_state"].get<std::string>();
      for (const auto& f : part.value("files", nlohmann::json::array())) {  // other ranks' shard files
        ckpt::ManifestFile mf;
        mf.name = f.at("name").get<std::string>();
        mf.bytes = f.at("bytes").get<uint64_t>();
        mf.xxh3 = ckpt::from_hex(f.at("xxh3").get<std::string>());
        mf.rank = rng.rank;
        mf.role = f.at("role").get<std::string>();
        files.push_back(std::move(mf));
      }
    }
    m.files = std::move(files);
    if (!m.rank_state.empty() && m.rank_state.size() != static_cast<size_t>(m.world_size))
      throw CheckpointError(rank_, "checkpoint " + path + " not committed: " + std::to_string(m.rank_state.size()) + " of " +
                                       std::to_string(m.world_size) + " ranks reported state of their own (the ranks' "
                                       "models or comm hooks differ)");
    const std::string text = m.to_json();
    ckpt::AtomicWriter manifest(path, ckpt::kManifestName, rank_);
    manifest.write(text.data(), text.size());
    manifest.finish();            // the rename: committed
    ckpt::fsync_dir(path, rank_);  // ... and durably so
    ++committed_;
    publish_manifest(job, text);
    if (is_snapshots_) {  // one per step, perhaps: not an event, and not the disk bandwidth the simulator learns
      retire_old();
      return;
    }
    detail::log(detail::LogLevel::debug, "checkpoint committed: " + path);
    int64_t bytes = 0;
    for (const auto& f : m.files) bytes += static_cast<int64_t>(f.bytes);
    monitor_->checkpoint_saved(job.step, path, bytes,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - job.started).count());
    retire_old();
  }

  // Every rank's part, in rank order. A part that fails authentication (commit_parts.h) was written
  // by someone outside the job: it is never used, and the key is read again until the rank's own
  // part replaces it (a rank's set overwrites one made ahead of it) or the commit timeout passes.
  // Deleting the forged value instead could delete the rank's part set a moment later.
  std::vector<nlohmann::json> collect_parts(const SaveJob& job) {
    if (ctx_.world_size() == 1) return {nlohmann::json::parse(own_part_)};
    const int world = ctx_.world_size();
    const auto timeout = owner_.options_.commit_timeout;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(key(job, r));
    auto& s = store();
    auto not_committed = [&](const std::string& why) {
      return CheckpointError(rank_, "checkpoint step " + std::to_string(job.step) + " not committed: " + why +
                                        " within " + std::to_string(timeout.count() / 1000) + " s");
    };
    try {
      s->wait(keys, timeout);
    } catch (const std::exception&) {
      std::string missing;
      for (int r = 0; r < world; ++r)
        if (!s->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw not_committed("rank(s) " + missing + " did not report their part");
    }
    std::vector<nlohmann::json> parts;
    for (int r = 0; r < world; ++r) {
      for (bool warned = false;;) {
        const auto bytes = s->get(keys[r]);
        auto part = ckpt::opened_part(ctx_.env().job_key, keys[r], ctx_.env().restart_count,
                                      std::string(bytes.begin(), bytes.end()));
        if (part) {
          parts.push_back(std::move(*part));
          s->deleteKey(keys[r]);
          break;
        }
        if (!warned) {
          warned = true;
          detail::log_warn("ignored a checkpoint commit part for rank " + std::to_string(r) + " at step " +
                           std::to_string(job.step) + " that fails authentication (not written by a rank of this "
                           "job); waiting for the rank's own");
        }
        if (std::chrono::steady_clock::now() > deadline) {
          throw not_committed("rank " + std::to_string(r) + "'s part failed authentication (a process outside the "
                              "job writes to its store) and the rank's own did not replace it");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return parts;
  }

  // The writer thread talks to the store over its own connection: the job's TCPStore client is
  // the main thread's, and a commit may wait on it for minutes.
  c10::intrusive_ptr<c10d::Store>& store() {
    if (!store_) {
      if (dynamic_cast<c10d::TCPStore*>(ctx_.store().get()) == nullptr) {
        // In-memory (ranks as threads) or file store (one machine): thread-safe, and a wait on
        // either holds no connection that the main thread needs.
        store_ = ctx_.store();
      } else {
        c10d::TCPStoreOptions opts;
        opts.port = static_cast<uint16_t>(ctx_.env().master_port);
        opts.isServer = false;
        opts.waitWorkers = false;
        opts.timeout = owner_.options_.commit_timeout;
        store_ = c10::make_intrusive<c10d::TCPStore>(ctx_.env().master_addr, opts);
      }
    }
    return store_;
  }

  void retire_old() {
    const auto listed = ckpt::list_checkpoints(owner_.dir_, /*read_manifests=*/!is_snapshots_);
    const int keep = owner_.options_.keep_last > 0 ? owner_.options_.keep_last : 1 << 30;
    for (const auto& path : ckpt::retired_checkpoints(listed, keep, owner_.options_.keep_every_steps))
      if (!ckpt::remove_checkpoint(path)) detail::log_warn("could not fully remove old checkpoint " + path);
  }

  // --- in-flight save ---------------------------------------------------------------------------
  void start(SaveJob job) {
    finished_ = false;
    writer_ = std::thread([this, job = std::move(job)] {
      try {
        write_and_commit(job);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex_);
        pending_error_ = e.what();
      }
      finished_ = true;
    });
  }

  bool busy() const { return writer_.joinable() && !finished_; }

  /// Joins the writer; returns its error message (empty when it succeeded or none ran).
  std::string join() {
    if (writer_.joinable()) writer_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    std::string e;
    std::swap(e, pending_error_);
    return e;
  }

  /// Collects a finished writer's result without waiting for one still running.
  std::string reap_if_finished() { return writer_.joinable() && finished_ ? join() : std::string(); }

  // --- in-memory snapshots (snapshots.h) ---------------------------------------------------------
  // The inner Checkpointer for the job's snapshot directory, when snapshots are asked for and every
  // rank has one (the ranks agree: a rank that saved alone would leave rank 0 waiting for its part).
  void open_snapshots() {
    const int64_t every = owner_.options_.snapshot_every_steps;
    if (every <= 0) return;
    std::string why_none;
    std::string dir = ckpt::snapshot_dir_for(owner_.options_.snapshot_dir, owner_.dir_, &why_none);
    if (allreduce_int(ctx_, dir.empty() ? 0 : 1, c10d::ReduceOp::MIN) == 0) {
      if (rank_ == 0)
        detail::log(detail::LogLevel::info, "no in-memory snapshots: " +
                                                (why_none.empty() ? "another rank has no snapshot directory" : why_none));
      return;
    }
    // Each machine keeps a whole copy: its first rank writes the replicated files (the same bytes
    // on every rank) and rank 0's manifest, so that losing a machine loses no snapshot.
    const int64_t machines = allreduce_int(ctx_, ctx_.local_rank() == 0 ? 1 : 0, c10d::ReduceOp::SUM);
    CheckpointOptions options;
    options.keep_last = 2;  // the newest is being written while the one before stays whole
    options.commit_timeout = owner_.options_.commit_timeout;
    snapshots_ = std::make_unique<Checkpointer>(std::move(dir), owner_.ctx_, options);
    Impl& inner = *snapshots_->impl_;
    inner.is_snapshots_ = true;
    inner.program_ = ckpt::program_identity(rank_);
    inner.writes_replicated_ = rank_ == 0 || ctx_.local_rank() == 0;
    inner.other_copies_ = machines - 1;
  }

  // State that only its own rank holds (shards, PowerSGD's errors) would be on one machine only:
  // a job of several machines then keeps to disk (copies on a buddy machine: issue 19's next step).
  bool per_rank_state_on_several_machines(const TrainingState& state) {
    if (snapshots_->impl_->other_copies_ == 0) return false;
    bool per_rank = dynamic_cast<ShardedCheckpointable*>(state.module) != nullptr;
    if (auto* own = dynamic_cast<RankStateCheckpointable*>(state.module)) per_rank = per_rank || !own->rank_state().empty();
    if (per_rank && !per_rank_noted_ && rank_ == 0)
      detail::log(detail::LogLevel::info, "no in-memory snapshots: the model keeps state per rank (shards, a comm "
                                          "hook's), and the job spans several machines");
    per_rank_noted_ = per_rank_noted_ || per_rank;
    return per_rank;
  }

  // Starts a snapshot of this step when one is due. It waits for the previous one to be committed
  // first: so the newest committed snapshot is never more than one step behind. A failure costs
  // that snapshot only (a warning); the disk checkpoints are untouched.
  void maybe_snapshot(const TrainingState& state) {
    if (!snapshots_ || owner_.step_ % owner_.options_.snapshot_every_steps != 0) return;
    if (per_rank_state_on_several_machines(state)) return;
    snapshots_->step_ = owner_.step_;
    snapshots_->metadata_ = owner_.metadata_;
    try {
      snapshots_->save_async(state);
    } catch (const std::exception& e) {
      detail::log_warn(std::string("in-memory snapshot failed (training continues): ") + e.what());
    }
  }

  void wait_for_snapshot() {
    if (!snapshots_) return;
    const std::string e = snapshots_->impl_->join();
    if (!e.empty()) detail::log_warn("in-memory snapshot failed (training continues): " + e);
  }

  Checkpointer& owner_;
  Context& ctx_;
  const int rank_;
  int64_t sequence_ = 0;
  int64_t saves_started_ = 0;
  std::atomic<int64_t> committed_{0};
  // The monitor current when the Checkpointer was made: commits may run on the writer thread.
  detail::StepMonitor* monitor_ = &detail::current_step_monitor();
  std::vector<at::Tensor> staged_model_, staged_optim_, staged_shard_, staged_rank_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string own_part_;
  std::thread writer_;
  std::atomic<bool> finished_{true};
  mutable std::mutex mutex_;
  std::string pending_error_;
  std::string last_error_;
  steady_clock::time_point last_save_ = steady_clock::now();
  std::unique_ptr<Checkpointer> snapshots_;  // in-memory snapshots, when asked for and possible
  bool is_snapshots_ = false;                // this is a snapshot Checkpointer (no monitor events)
  std::string program_;                      // snapshots: this program's identity, in the manifests written
  bool writes_replicated_ = rank_ == 0;      // writes the replicated files (snapshots: each machine's first rank)
  int64_t other_copies_ = 0;                 // snapshots: machines other than rank 0's that keep a copy
  bool per_rank_noted_ = false;              // said once why a job of several machines takes no snapshots
};

int64_t ckpt::allreduce_int(Context& ctx, int64_t value, c10d::ReduceOp op) {
  if (ctx.world_size() == 1) return value;
  std::vector<at::Tensor> t{at::scalar_tensor(value, at::kLong).reshape({1})};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  ctx.group()->allreduce(t, opts)->wait();
  return t[0].item<int64_t>();
}

Checkpointer::Checkpointer(std::string dir, std::shared_ptr<Context> ctx, CheckpointOptions options)
    : dir_(std::move(dir)), ctx_(std::move(ctx)), options_(options) {
  if (!ctx_) throw ConfigError(-1, "Checkpointer needs the Context from cohort::init()");
  const int rank = ctx_->rank();
  if (dir_.empty()) throw ConfigError(rank, "Checkpointer: the checkpoint directory is empty");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (options_.every_steps < 0 || options_.every_seconds < 0 || options_.keep_last < 0 ||
      options_.keep_every_steps < 0 || options_.snapshot_every_steps < 0)
    throw ConfigError(rank, "Checkpointer: every_steps, every_seconds, keep_last, keep_every_steps and "
                            "snapshot_every_steps must be >= 0");
  impl_ = std::make_unique<Impl>(*this);
  impl_->sequence_ = detail::ContextInternals::next_sequence(*ctx_);
  impl_->open_snapshots();  // before the lock below: it makes a Checkpointer too
  std::lock_guard<std::mutex> lock(g_live_mutex);
  if (!g_live) {
    g_live = new std::set<Checkpointer*>();
    std::atexit([] {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      for (Checkpointer* c : *g_live) {
        const std::string e = c->impl_->join();
        if (!e.empty()) detail::log_warn("checkpoint save failed: " + e);
      }
    });
  }
  g_live->insert(this);
}

Checkpointer::~Checkpointer() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live->erase(this);
  }
  const std::string e = impl_->join();
  if (!e.empty()) detail::log_warn("checkpoint save failed: " + e);
}

std::string Checkpointer::last_error() const { return impl_->last_error_; }
int64_t Checkpointer::saves_committed() const { return impl_->committed_; }

void Checkpointer::wait() {
  impl_->wait_for_snapshot();
  const std::string e = impl_->join();
  if (!e.empty()) {
    impl_->last_error_ = e;
    throw CheckpointError(ctx_->rank(), "background checkpoint save failed: " + e);
  }
}

void Checkpointer::save(const TrainingState& state) {
  wait();
  SaveJob job = impl_->snapshot(state, /*copy=*/false);
  impl_->last_save_ = steady_clock::now();
  try {
    impl_->write_and_commit(job);
  } catch (const Error& e) {
    impl_->last_error_ = e.what();
    throw;
  } catch (const std::exception& e) {  // the store's own errors
    impl_->last_error_ = e.what();
    throw CheckpointError(ctx_->rank(), std::string("checkpoint save failed: ") + e.what());
  }
  impl_->last_error_.clear();
}

void Checkpointer::save_async(const TrainingState& state) {
  wait();
  impl_->last_error_.clear();
  impl_->last_save_ = steady_clock::now();
  impl_->start(impl_->snapshot(state, /*copy=*/true));
}

bool Checkpointer::maybe_save(const TrainingState& state) {
  ++step_;
  const std::string earlier = impl_->reap_if_finished();
  if (!earlier.empty()) {
    impl_->last_error_ = earlier;
    detail::log_warn("background checkpoint save failed (training continues): " + earlier);
  }
  bool due = options_.every_steps > 0 && step_ % options_.every_steps == 0;
  if (options_.every_seconds > 0) {
    const bool late = duration<double>(steady_clock::now() - impl_->last_save_).count() >= options_.every_seconds;
    // Clocks differ between ranks: rank 0's view decides, so every rank saves at the same step.
    due |= allreduce_int(*ctx_, ctx_->rank() == 0 && late ? 1 : 0, c10d::ReduceOp::MAX) != 0;
  }
  if (due && options_.async && options_.when_busy == CheckpointOptions::WhenBusy::skip &&
      allreduce_int(*ctx_, impl_->busy() ? 1 : 0, c10d::ReduceOp::MAX) != 0) {
    detail::log(detail::LogLevel::info, "checkpoint at step " + std::to_string(step_) +
                                            " skipped: the previous save is still being written");
    due = false;
  }
  if (!due) {
    impl_->maybe_snapshot(state);
    return false;
  }
  try {
    if (options_.async) {
      const std::string e = impl_->join();
      if (!e.empty()) detail::log_warn("background checkpoint save failed (training continues): " + e);
      impl_->last_save_ = steady_clock::now();
      impl_->start(impl_->snapshot(state, /*copy=*/true));
      // The disk save commits in the background, perhaps steps from now: the snapshot of this
      // step keeps the newest committed state within one step of training meanwhile.
      impl_->maybe_snapshot(state);
    } else {
      save(state);
    }
  } catch (const std::exception& e) {
    impl_->last_error_ = e.what();
    detail::log_warn(std::string("checkpoint save failed (training continues): ") + e.what());
    impl_->maybe_snapshot(state);
    return false;
  }
  return true;
}

std::optional<RestoreInfo> Checkpointer::restore_latest(const TrainingState& state) {
  COHORT_CHECK(state.module != nullptr, "TrainingState without a module");
  wait();
  const auto began = steady_clock::now();
  const int rank = ctx_->rank();
  Checkpointer* snapshots = impl_->snapshots_.get();
  if (snapshots && snapshots->impl_->other_copies_ > 0) ckpt::share_newest_snapshot(*ctx_, snapshots->dir_);
  const auto listed = snapshots ? ckpt::merge_listings(ckpt::list_checkpoints(dir_), ckpt::list_checkpoints(snapshots->dir_))
                                : ckpt::list_checkpoints(dir_);

  // Each rank loads the newest checkpoint it can verify; the ranks then agree on the oldest of
  // their choices (a file one rank cannot read rules that checkpoint out for all) and whoever
  // holds a newer one loads the agreed one. Every rank takes part in every round (a rank whose
  // choice already is the oldest keeps it and waits for the others' verdict), until all choices
  // are the same. The step only goes down, so this ends.
  struct Loaded {
    const ckpt::ListedCheckpoint* listed = nullptr;
    std::vector<std::unique_ptr<ckpt::TensorFileReader>> files;
    std::unique_ptr<ckpt::TensorFileReader> rank_state;  // the saved rank's own state this rank takes
  };
  auto* own_state = dynamic_cast<RankStateCheckpointable*>(state.module);  // DDP: its comm hook's per-rank state
  Loaded loaded;
  std::set<std::string> warned;
  int64_t bound = INT64_MAX;
  for (;;) {
    if (!loaded.listed || loaded.listed->step > bound) loaded = Loaded{};
    for (const auto& c : listed) {
      if (loaded.listed) break;  // the choice of the last round stands
      if (c.step > bound) continue;
      if (!c.manifest) {
        if (warned.insert(c.path).second) detail::log_warn("skipping checkpoint " + c.path + ": " + c.problem);
        continue;
      }
      if (snapshots && !c.manifest->program.empty() && !snapshots->impl_->program_.empty() &&
          c.manifest->program != snapshots->impl_->program_) {  // a snapshot of another program version
        if (warned.insert(c.path).second)
          detail::log_warn("skipping snapshot " + c.path + ": written by another program version (" + c.manifest->program +
                           "; this rank runs " + snapshots->impl_->program_ + ")");
        continue;
      }
      try {
        Loaded attempt{&c, {}, nullptr};
        for (const auto& f : c.manifest->files)
          if (f.role == "model" || f.role == "optimizer")  // replicated: every rank reads them
            attempt.files.push_back(std::make_unique<ckpt::TensorFileReader>(c.path, f, rank));  // verified here
        if (!c.manifest->sharding_json.empty()) ckpt::ShardFiles::check_present(c.path, *c.manifest, rank);
        if (own_state)
          attempt.rank_state = ckpt::open_rank_state(c.path, *c.manifest, rank);  // verified here
        ckpt::check_manifest_states(*c.manifest, rank);  // sampler, optimizer, RNG: before anything is applied
        loaded = std::move(attempt);
        break;
      } catch (const Error& e) {
        if (warned.insert(c.path).second)
          detail::log_warn("skipping checkpoint " + c.path + ": " + std::string(e.what()));
      } catch (const std::exception& e) {
        if (warned.insert(c.path).second) detail::log_warn("skipping checkpoint " + c.path + ": " + e.what());
      }
    }
    const int64_t mine = loaded.listed ? loaded.listed->step : -1;
    const int64_t lowest = allreduce_int(*ctx_, mine, c10d::ReduceOp::MIN);
    if (allreduce_int(*ctx_, mine, c10d::ReduceOp::MAX) == lowest) break;
    bound = lowest;
  }
  if (!loaded.listed) return std::nullopt;
  const bool from_snapshot = snapshots && loaded.listed->path.rfind(snapshots->dir_ + "/", 0) == 0;

  const ckpt::Manifest& m = *loaded.listed->manifest;
  for (const auto& [name, object] : state.user)  // before anything is applied
    if (!m.user.count(name))
      throw CheckpointError(rank, loaded.listed->path + " holds no state for \"" + name +
                                      "\" (saved by a program without it): restore without it, or start afresh");
  auto* sharded = dynamic_cast<ShardedCheckpointable*>(state.module);
  if (sharded && m.sharding_json.empty())
    throw CheckpointError(rank, loaded.listed->path + " holds unsharded state; a ShardedDataParallel or LocalSGD model "
                                "restores only per-rank checkpoints (saved by one of them)");
  if (!sharded && !m.sharding_json.empty())
    throw CheckpointError(rank, loaded.listed->path + " holds per-rank state (saved by ShardedDataParallel or "
                                "LocalSGD); restore it into a model of that kind");
  if (sharded) {
    torch::NoGradGuard no_grad;
    for (const auto& f : loaded.files) {
      if (f->name() != "model.safetensors") continue;
      for (auto& [name, tensor] : sharded->replicated_tensors()) {
        const ckpt::TensorEntry* e = f->find(name);
        if (!e || c10::IntArrayRef(e->shape) != tensor.sizes())
          throw CheckpointError(rank, "model.safetensors has no tensor \"" + name + "\" of this shape: the checkpoint is of another model");
        f->read_into(*e, tensor);
      }
    }
    sharded->load_shard_state(ckpt::ShardFiles(loaded.listed->path, m, rank), state.optimizer);
  }
  for (const auto& f : loaded.files) {
    if (!sharded && f->name() == "model.safetensors") ckpt::load_module_tensors(*state.module, *f, rank);
  }
  if (state.optimizer && !sharded) {
    if (m.optimizer_json.empty())
      throw CheckpointError(rank, loaded.listed->path + " holds no optimizer state, but an optimizer was given");
    for (const auto& f : loaded.files)
      if (f->name() == "optimizer.safetensors")
        ckpt::load_optimizer_state(*state.optimizer, *state.module, *f, m.optimizer_json, rank);
  }
  if (own_state)
    own_state->load_rank_state(ckpt::read_rank_state(loaded.rank_state.get(), m, rank), m.world_size == ctx_->world_size());
  if (state.sampler && !m.sampler_json.empty()) state.sampler->load_state(SamplerState::from_json(m.sampler_json));
  for (const auto& [name, object] : state.user) {
    try {
      object->load_state_dict(m.user.at(name));
    } catch (const std::exception& e) {
      throw CheckpointError(rank, loaded.listed->path + ": the state of \"" + name + "\" does not load: " + e.what());
    }
  }
  for (const auto& [name, text] : m.user)
    if (!state.user.count(name))
      detail::log_warn(loaded.listed->path + " holds state for \"" + name + "\", which this restore was not given");
  for (const auto& r : m.rng)
    if (r.rank == rank) ckpt::restore_rng(r, rank);
  if (rank >= m.world_size)
    detail::log(detail::LogLevel::info, "rank " + std::to_string(rank) + " did not exist in the checkpoint (world size " +
                                            std::to_string(m.world_size) + "): its RNG keeps its current state");
  step_ = m.step;
  if (snapshots) {
    snapshots->step_ = m.step;
    if (ctx_->local_rank() == 0) ckpt::drop_snapshots_after(snapshots->dir_, m.step);  // each machine's copy
  }
  impl_->monitor_->set_step(m.step);  // the monitor's step numbers continue from here
  if (rank == 0)
    impl_->monitor_->checkpoint_restored(m.step, loaded.listed->path, from_snapshot,
                                         duration<double>(steady_clock::now() - began).count());
  metadata_ = m.metadata;
  impl_->last_save_ = steady_clock::now();
  RestoreInfo info{loaded.listed->path, m.step, m.epoch, m.world_size, from_snapshot, m.metadata};
  detail::log(detail::LogLevel::info, "restored " + info.path);
  return info;
}

}  // namespace cohort
