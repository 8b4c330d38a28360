// Steps 3 and 4 of a save (checkpointer.cpp): every rank reports its part through the store,
// rank 0 waits for all of them and writes the manifest (the commit), retention follows. Snapshots
// on several machines: the other machines' writers adopt rank 0's manifest.
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <stdexcept>
#include <thread>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/commit_parts.h"
#include "checkpoint/format/rank_state_file.h"
#include "checkpoint/storage/file_io.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/error.h"
#include "checkpoint/checkpointer_impl.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/json_fields.h"
#include "runtime/log.h"

namespace cohort {
namespace {

int64_t now_unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Waits until every key is set. c10d's FileStore (the store of a job on one machine) waits in
// sleeps of 10 ms, which a snapshot committed at every step of a 30 ms step cannot afford: there
// the keys are polled with a short backoff (a check is an open, a shared lock and a read of what
// was appended). The TCPStore's server answers a wait as soon as the keys are set.
// `abandon` (this rank leaves for a new generation, keep_running.h), or the agent's word that the
// job re-forms after `generation` (a peer was replaced: what it owed will not come), ends the wait
// early, unless the keys came after all.
void wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                   const std::atomic<bool>& abandon_flag, int generation) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  const auto abandon = [&] { return abandon_flag.load() || detail::newest_rejoin_generation() > generation; };
  if (dynamic_cast<c10d::FileStore*>(&store) == nullptr) {
    // The TCPStore answers within a slice as soon as the keys are set; between slices, `abandon`.
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      try {
        store.wait(keys, std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(200))));
        return;
      } catch (const std::exception&) {
        if (abandon() || clock::now() > deadline) throw;
      }
    }
  }
  auto pause = std::chrono::microseconds(50);
  while (!store.check(keys)) {
    if (clock::now() > deadline || abandon()) throw std::runtime_error("keys not set within the timeout");
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(2));
  }
}

}  // namespace
void Checkpointer::Impl::publish_manifest(const SaveJob& job, const std::string& text) {
  if (other_copies_ == 0) return;
  const std::string k = manifest_key(job);
  const std::string value = ckpt::sealed_part(ctx_.env().job_key, k, ctx_.env().restart_count, {{"manifest", text}});
  store()->set(k, std::vector<uint8_t>(value.begin(), value.end()));
}

void Checkpointer::Impl::adopt_manifest(const SaveJob& job, const std::string& path) {
  const std::string k = manifest_key(job);
  auto& s = store();
  try {
    wait_for_keys(*s, {k}, owner_.options_.commit_timeout, abandon_, job.generation);  // rank 0 may have failed
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

void Checkpointer::Impl::mark_snapshot_done(const SaveJob& job) {
  if (!is_snapshots_ || rank_ != 0 || ctx_.world_size() == 1) return;
  try {
    store()->set(done_key(job.generation, job.index), std::vector<uint8_t>{1});
    // The older marks go once every rank reported its part of this snapshot: each waited for the
    // mark before it, so none waits for one of them any more. A snapshot that failed before every
    // part came (here a buddy's copy failed) deletes none: a rank slower to get there may still
    // be waiting for the previous mark, and would wait until the timeout.
    if (parts_complete_ == job.index) {
      for (int64_t k = oldest_done_mark_; k < job.index; ++k) store()->deleteKey(done_key(job.generation, k));
      oldest_done_mark_ = job.index;
    }
  } catch (const std::exception& e) {
    detail::log_warn(std::string("snapshot of step ") + std::to_string(job.step) + ": could not mark it done: " + e.what());
  }
}

void Checkpointer::Impl::wait_previous_snapshot(const SaveJob& job) {
  if (!is_snapshots_ || rank_ == 0 || ctx_.world_size() == 1 || job.index == 0) return;
  try {
    wait_for_keys(*store(), {done_key(job.generation, job.index - 1)}, owner_.options_.commit_timeout, abandon_,
                  job.generation);
  } catch (const std::exception&) {
    stop_if_job_reforms(job.generation);  // rank 0 was replaced: as maybe_save() when the word came earlier
    // rank 0 stalled: this snapshot goes on; its commit reports it
    detail::log_warn("snapshot of step " + std::to_string(job.step) + ": rank 0 did not finish the previous one");
  }
}

void Checkpointer::Impl::stop_if_job_reforms(int generation) const {
  if (const int asked = detail::newest_rejoin_generation(); asked > generation)
    throw CommError(rank_, "the job re-forms around a replaced peer (generation " + std::to_string(asked) + ")");
}

std::string Checkpointer::Impl::key(int generation, int64_t index, int rank) const {
  const std::string gen = generation > 0 ? "gen" + std::to_string(generation) + "/" : "";
  return "cohort/ckpt/" + gen + std::to_string(sequence_) + "/" + std::to_string(index) + "/" +
         std::to_string(rank);
}

void Checkpointer::Impl::report(const SaveJob& job, const nlohmann::json& part) {
  if (ctx_.world_size() == 1) {
    own_part_ = detail::dump_text(part);  // an error names a path: any bytes
    return;
  }
  const std::string k = key(job, rank_);
  const std::string value = ckpt::sealed_part(ctx_.env().job_key, k, ctx_.env().restart_count, part);
  store()->set(k, std::vector<uint8_t>(value.begin(), value.end()));
}

void Checkpointer::Impl::commit(const SaveJob& job, const std::string& path, std::vector<ckpt::ManifestFile> files) {
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
  std::vector<std::string> mesh_pieces;
  for (const auto& part : collect_parts(job)) {
    if (job.mesh && part.contains("mesh")) mesh_pieces.push_back(part["mesh"].get<std::string>());
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
  if (job.mesh) {
    if (mesh_pieces.size() != static_cast<size_t>(m.world_size))
      throw CheckpointError(rank_, "checkpoint " + path + " not committed: " + std::to_string(mesh_pieces.size()) + " of " +
                                       std::to_string(m.world_size) + " ranks saved a model on a device mesh (the ranks' models differ)");
    m.sharding_json = ckpt::merge_mesh_pieces(job.mesh_json, mesh_pieces, rank_);
  }
  // Split replicated files (snapshots on one machine): rank 1 describes no optimizer of its own,
  // so one it lacks (the ranks' programs differ) would be a manifest that no restore accepts.
  if (split_replicated_ && !m.optimizer_json.empty() && m.sharding_json.empty() &&
      std::none_of(m.files.begin(), m.files.end(), [](const auto& f) { return f.role == "optimizer"; }))
    throw CheckpointError(rank_, "checkpoint " + path + " not committed: rank 1 wrote no optimizer state, rank 0 has an "
                                 "optimizer (the ranks' training states differ)");
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

std::vector<nlohmann::json> Checkpointer::Impl::collect_parts(const SaveJob& job) {
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
    wait_for_keys(*s, keys, timeout, abandon_, job.generation);
  } catch (const std::exception&) {
    std::string missing;
    for (int r = 0; r < world; ++r)
      if (!s->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (abandon_ || detail::newest_rejoin_generation() > job.generation)
      throw CheckpointError(rank_, "checkpoint step " + std::to_string(job.step) + " given up: the job re-forms "
                                   "around a replaced peer before rank(s) " + missing + " reported their part");
    throw not_committed("rank(s) " + missing + " did not report their part");
  }
  parts_complete_ = job.index;
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

c10::intrusive_ptr<c10d::Store>& Checkpointer::Impl::store() {
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

void Checkpointer::Impl::retire_old() {
  const auto listed = ckpt::list_checkpoints(owner_.dir_, /*read_manifests=*/!is_snapshots_);
  const int keep = owner_.options_.keep_last > 0 ? owner_.options_.keep_last : 1 << 30;
  const auto retired = ckpt::retired_checkpoints(listed, keep, owner_.options_.keep_every_steps);
  // Snapshots keep the files of what they retire for the next one, each in the spare directory of
  // the rank that writes it: this rank's own, and on one machine every rank's (each rank waits for
  // this commit before its next capture takes them over: wait_previous_snapshot). Several
  // machines: each machine's writer retires its copy, and the other ranks' files go.
  std::map<std::string, std::string> kept;
  if (is_snapshots_ && !retired.empty()) {
    const bool every_rank = rank_ == 0 && other_copies_ == 0;
    const int first = every_rank ? 0 : rank_, last = every_rank ? ctx_.world_size() - 1 : rank_;
    for (int r = first; r <= last; ++r) {
      if (::mkdir(spare_dir(r).c_str(), 0700) != 0 && errno != EEXIST) continue;
      if (!ckpt::real_directory_problem(spare_dir(r)).empty()) continue;  // a link: nothing moves out of the folder
      for (const auto& name : file_names_of(r)) kept[name] = spare_dir(r);
    }
  }
  for (const auto& path : retired)
    if (!ckpt::remove_checkpoint(path, kept)) detail::log_warn("could not fully remove old checkpoint " + path);
}

std::vector<std::string> Checkpointer::Impl::file_names_of(int rank) const {
  std::vector<std::string> names;
  const bool machine_writer = rank == rank_ ? writes_replicated_ : rank == 0;
  if (machine_writer) names.push_back("model.safetensors");
  if (split_replicated_ ? rank == 1 : machine_writer) names.push_back("optimizer.safetensors");
  names.push_back(ckpt::per_rank_file_name("shard", rank, ctx_.world_size()));
  names.push_back(ckpt::per_rank_file_name("rank", rank, ctx_.world_size()));
  return names;
}


}  // namespace cohort
