// Step 2 of a save (checkpointer.cpp): the files, written by the background writer (async saves)
// or the caller, then the report and commit (save_commit.cpp).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/checkpointer_impl.h"
#include "checkpoint/storage/file_io.h"
#include "checkpoint/format/rank_state_file.h"
#include "checkpoint/format/tensor_file.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/error.h"

namespace cohort {
namespace {

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

}  // namespace
Checkpointer::Impl::~Impl() {
  writer_.reset();  // finishes the save in flight first: it uses the members declared after it
}

bool Checkpointer::Impl::writes_files(const SaveJob& job) const {
  return writes_replicated_ || job.sharded || job.has_rank_state || (writes_optimizer() && !job.optimizer_json.empty());
}

nlohmann::json Checkpointer::Impl::part_of(const SaveJob& job) const {
  nlohmann::json part{{"rank", rank_}, {"rng_cpu", job.rng.cpu}, {"rng_cuda", job.rng.cuda}};
  if (job.has_rank_state) part["rank_state"] = job.rank_text;
  if (job.mesh) part["mesh"] = ckpt::pieces_with_hashes(job.mesh_pieces, job.shard);  // the writer's thread
  return part;
}

void Checkpointer::Impl::write_and_commit(const SaveJob& job) {
  detail::MonitorSpan span(monitor_, "ckpt_write", "io");  // the writer's thread; the next step's record takes it
  const std::string path = owner_.dir_ + "/" + ckpt::step_dir_name(job.step);
  nlohmann::json part = part_of(job);
  std::vector<ckpt::ManifestFile> files;
  std::string error;
  std::exception_ptr failed;
  try {
    if (writes_files(job)) files = write_files(job, path);
  } catch (const Error& e) {
    error = e.what();
    failed = std::current_exception();
  }
  // Every rank takes part in the buddies' exchange, even one whose files failed (it sends none),
  // so that no buddy waits for it until the timeout.
  if (buddies_.active() && (job.sharded || job.has_rank_state)) {
    const std::string problem = copy_to_buddies(job, path, files);
    if (error.empty() && !problem.empty()) error = problem;
  }
  if (!error.empty()) {
    part["error"] = error;
    report(job, part);
    if (failed) std::rethrow_exception(failed);
    throw CheckpointError(rank_, error);
  }
  if (rank_ != 0) {  // shard, rank_state and (split) optimizer files travel to rank 0 in the part
    auto& listed = part["files"] = nlohmann::json::array();
    for (const auto& f : files)
      if (!writes_replicated_ || (f.role != "model" && f.role != "optimizer"))  // not a machine's copy of rank 0's
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

std::vector<ckpt::ManifestFile> Checkpointer::Impl::write_files(const SaveJob& job, const std::string& path) {
  make_dirs(owner_.dir_, rank_);
  struct stat st {};
  const bool existed = ::lstat(path.c_str(), &st) == 0;
  make_dir(path, rank_);
  // A step path that is a link (or a file) is someone else's: refused before anything is written or
  // removed there, also when it appeared between the lstat and the mkdir (EEXIST). The writers
  // below open the directory with O_NOFOLLOW besides (AtomicWriter), so a later swap fails too.
  if (const std::string why = ckpt::real_directory_problem(path); !why.empty())
    throw CheckpointError(rank_, "could not save step " + std::to_string(job.step) + " into " + path + ": " + why);
  const std::string shard_name = job.sharded ? per_rank_name("shard") : "";
  const std::string rank_name = job.has_rank_state ? per_rank_name("rank") : "";
  if (existed) {
    // The same step saved before (the job went back to an older checkpoint and got here again):
    // un-commit the old one first, so that nothing mixes old and new files under a manifest.
    if (::unlink((path + "/" + ckpt::kManifestName).c_str()) == 0) ckpt::fsync_dir(path, rank_);
    // A save of this step killed mid-write left temporary files of the names this rank writes
    // (rank 0 also writes the manifest).
    std::vector<std::string> own = own_file_names();
    if (writes_replicated_) own.push_back(ckpt::kManifestName);
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
  // Snapshots overwrite this rank's retired files in place (spare_dir()); checkpoints on disk make new ones.
  auto write = [&](const std::string& name, const ckpt::NamedTensors& tensors) {
    for (const auto& [mapped_name, m] : job.mapped)  // the capture wrote the bytes already
      if (mapped_name == name) return mappings_.commit(*m, spare_dir() + "/" + name, path, name);
    const bool spare = is_snapshots_ && ckpt::real_directory_problem(spare_dir()).empty();  // never a link's files
    const std::string reuse = spare ? spare_dir() + "/" + name : "";
    return ckpt::write_tensor_file(path, name, tensors, rank_, direct, reuse);
  };
  try {
    if (writes_replicated_) add(write("model.safetensors", job.model), "model");
    if (writes_optimizer() && !job.optimizer_json.empty() && !job.sharded)
      add(write("optimizer.safetensors", job.optimizer), "optimizer");
    if (job.sharded) add(write(shard_name, job.shard), "shard");
    if (job.has_rank_state) add(write(rank_name, job.rank_tensors), "rank_state");
    ckpt::fsync_dir(path, rank_);
  } catch (const Error&) {
    for (const auto& f : files) ::unlink((path + "/" + f.name).c_str());
    ::rmdir(path.c_str());  // only if empty: another rank's part may be there
    throw;
  }
  return files;
}

void Checkpointer::Impl::start(SaveJob job) {
  if (!writes_files(job) && rank_ != 0) {
    // Nothing to write here (a replicated model on a rank other than its writer): the rank's part
    // is its RNG state, reported now. A thread per save only to set one key cost a snapshot every
    // step its start and, on a busy machine, a wait for the scheduler before rank 0 could commit.
    try {
      report(job, part_of(job));
    } catch (const std::exception& e) {  // as from the writer: reported by the next join()
      std::lock_guard<std::mutex> lock(mutex_);
      pending_error_ = e.what();
    }
    return;
  }
  if (!writer_) writer_ = std::make_unique<detail::CommQueue>();
  writing_ = writer_->submit([this, job = std::move(job)] {
    try {
      write_and_commit(job);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_error_ = e.what();
    }
    mark_snapshot_done(job);
  });
}

std::string Checkpointer::Impl::join() {
  if (writing_.valid()) {
    writing_.wait();
    writing_ = {};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::string e;
  std::swap(e, pending_error_);
  return e;
}

}  // namespace cohort
