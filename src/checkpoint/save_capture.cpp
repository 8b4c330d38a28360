// Step 1 of a save (checkpointer.cpp): the capture, on the caller's thread. Everything a save
// writes is taken here — staged copies of the tensors (async saves), the sampler, RNG, optimizer
// and user state — so training may change the live state as soon as it returns.
#include <torch/types.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/checkpointer_impl.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "cohort/mesh_checkpoint.h"
#include "cohort/sharded_state.h"
#include "runtime/check.h"
#include "runtime/log.h"

namespace cohort {
SaveJob Checkpointer::Impl::capture(const TrainingState& state, bool copy) {
  COHORT_CHECK(state.module != nullptr, "TrainingState without a module");
  detail::MonitorSpan span(monitor_, is_snapshots_ ? "snapshot_copy" : "ckpt_capture", "io");
  SaveJob job;
  job.step = owner_.step_;
  job.index = saves_started_++;
  job.generation = ctx_.generation();
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
  // Snapshots: the previous one committed first (wait_previous_snapshot says why), and so retired:
  // on one machine this rank's files of it wait in its spare directory before the capture takes
  // them over.
  if (copy && is_snapshots_) wait_previous_snapshot(job);
  job.rng = ckpt::capture_rng(*state.module, rank_);
  if (copy && is_snapshots_) mappings_.begin_save();
  if (auto* meshed = dynamic_cast<MeshCheckpointable*>(state.module)) {
    // Staged, never mapped into a snapshot's file: the part hashes the staged pieces (mesh_state.h).
    ckpt::MeshCapture s = ckpt::mesh_capture(*meshed, state.optimizer, rank_);
    job.sharded = job.mesh = true;
    job.mesh_pieces = std::move(s.pieces_json);
    job.mesh_json = std::move(s.mesh_json);
    job.shard = copy ? stage(s.tensors, staged_shard_) : cpu_contiguous(s.tensors);
    if (rank_ == 0) job.optimizer_json = s.optimizer_json;  // rank 0's model file holds no tensors
    return job;
  }
  if (auto* sharded = dynamic_cast<ShardedCheckpointable*>(state.module)) {
    ShardState s = sharded->shard_state(state.optimizer);
    job.sharded = true;
    job.sharding_json = s.layout_json;
    job.shard = copy ? map_or_stage(per_rank_name("shard"), s.tensors, staged_shard_, job) : cpu_contiguous(s.tensors);
    if (rank_ == 0) {
      job.optimizer_json = s.optimizer_json;
      const auto replicated = sharded->replicated_tensors();
      job.model = copy ? map_or_stage("model.safetensors", replicated, staged_model_, job) : cpu_contiguous(replicated);
    }
    return job;
  }
  if (auto* own = dynamic_cast<RankStateCheckpointable*>(state.module)) {
    RankState s = own->rank_state();
    job.has_rank_state = !s.empty();
    job.rank_text = std::move(s.text);
    job.rank_tensors = copy ? map_or_stage(per_rank_name("rank"), s.tensors, staged_rank_, job) : cpu_contiguous(s.tensors);
  }
  // Replicated state: one writer (snapshots: one per machine, or split between ranks 0 and 1).
  // Rank 0 describes the optimizer in the manifest whether or not it writes its tensors.
  if (writes_replicated_ || writes_optimizer()) {
    if (state.optimizer) job.optimizer = ckpt::optimizer_tensors(*state.optimizer, *state.module, &job.optimizer_json, rank_);
    if (!writes_optimizer()) job.optimizer.clear();
    if (writes_replicated_) job.model = ckpt::module_tensors(*state.module);
    job.model = copy ? map_or_stage("model.safetensors", job.model, staged_model_, job) : cpu_contiguous(job.model);
    job.optimizer = copy ? map_or_stage("optimizer.safetensors", job.optimizer, staged_optim_, job)
                         : cpu_contiguous(job.optimizer);
  }
  return job;
}

ckpt::NamedTensors Checkpointer::Impl::cpu_contiguous(const NamedTensors& live) {
  NamedTensors out;
  for (const auto& [name, t] : live) out.emplace_back(name, t.detach().to(at::kCPU).contiguous());
  return out;
}

ckpt::NamedTensors Checkpointer::Impl::stage(const NamedTensors& live, std::vector<at::Tensor>& buffers) {
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

ckpt::NamedTensors Checkpointer::Impl::map_or_stage(const std::string& name, const NamedTensors& live,
                                                    std::vector<at::Tensor>& buffers, SaveJob& job) {
  // No tensors, nothing to copy (no optimizer, no state of the rank's own): no file is mapped for it.
  if (is_snapshots_ && !live.empty() && map_into_file(name, live, job)) {
    buffers.clear();  // the staging memory of a save that could not map, no longer needed
    return {};
  }
  return stage(live, buffers);
}

bool Checkpointer::Impl::map_into_file(const std::string& name, const NamedTensors& live, SaveJob& job) {
  torch::NoGradGuard no_grad;
  uint64_t bytes = 0;
  std::string header;
  const ckpt::Mapping* m = nullptr;
  try {  // any problem (a dtype safetensors lacks too) is the writer's to report, as without mapping
    header = ckpt::tensor_file_header(live, rank_, &bytes);
    std::error_code ec;
    std::filesystem::create_directories(spare_dir(), ec);  // where the file is mapped until its commit
    if (const std::string why = ckpt::real_directory_problem(spare_dir()); !why.empty())  // its files are not ours
      throw CheckpointError(rank_, spare_dir() + ": " + why);
    m = &mappings_.map(spare_dir() + "/" + name, bytes);
  } catch (const Error& e) {
    detail::log(detail::LogLevel::debug, std::string("snapshot file written instead of mapped: ") + e.what());
    return false;
  }
  std::memcpy(m->data, header.data(), header.size());
  std::vector<CopySlice> slices;
  uint64_t at = header.size();
  for (const auto& [tensor_name, t] : live) {
    if (t.device().is_cpu() && t.is_contiguous())
      slices.push_back({m->data + at, static_cast<const char*>(t.data_ptr()), t.nbytes()});
    else  // CUDA (device to host) or strided: torch's copy into the file's pages
      at::from_blob(m->data + at, t.sizes(), t.options().device(at::kCPU)).copy_(t);
    at += t.nbytes();
  }
  parallel_copy(slices);
  job.mapped.emplace_back(name, m);
  return true;
}

void Checkpointer::Impl::parallel_copy(const std::vector<CopySlice>& slices) {
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

}  // namespace cohort
