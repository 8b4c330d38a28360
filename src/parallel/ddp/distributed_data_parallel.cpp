// DataParallelCore: construction-time checks and broadcasts, per-forward buffer broadcast, and
// the GradReducer that averages gradients during backward. See distributed_data_parallel.h.
#include "data_parallel_core.h"

#include "cohort/comm_hook.h"
#include "cohort/context.h"
#include "cohort/error.h"
#include "grad_reducer.h"
#include "parallel/comm_hooks/hierarchical_comm.h"
#include "monitor/worker_monitor.h"
#include "replica_sync.h"
#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/context_internals.h"

namespace cohort::detail {

void DataParallelCore::connect() {
  Context& c = *ctx_;
  const auto device = params_.front().device();
  const char* algos[] = {"automatic", "flat", "hierarchical"};
  check_same_model(c, named_,
                   "comm hook '" + (options_.comm_hook ? options_.comm_hook->describe() : "none") + "'\n" +
                       "allreduce '" + algos[static_cast<int>(options_.allreduce)] + "'\n");
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(*c.group(device), state, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024) + 1);
  std::unique_ptr<ReducerComm> comm;
  if (!options_.reference_mode && device.is_cpu() && options_.allreduce != AllreduceAlgo::flat) {
    std::string why;
    comm = HierarchicalComm::create(c, sequence_, why);  // collective; null on every rank alike
    if (!comm && options_.allreduce == AllreduceAlgo::hierarchical) {
      throw ConfigError(c.rank(), "DDP allreduce 'hierarchical' is not possible in this job: " + why);
    }
  }
  reducer_ = GradReducer::create(trainable_, c.group(device), detail::ContextInternals::shm_allreduce(c), c.rank(),
                                 c.world_size(), options_, monitor_, std::move(comm));
}

DataParallelCore::DataParallelCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                                   DDPOptions options)
    : module_(std::move(module)), ctx_(std::move(ctx)), options_(std::move(options)) {
  COHORT_CHECK(ctx_ != nullptr, "DistributedDataParallel needs a Context (cohort::init())");
  Context& c = *ctx_;

  for (const auto& p : module_->named_parameters(/*recurse=*/true)) {
    named_.push_back({"parameter", p.key(), p.value()});
    params_.push_back(p.value());
    if (p.value().requires_grad()) trainable_.push_back({p.key(), p.value()});
  }
  for (const auto& b : module_->named_buffers(/*recurse=*/true)) {
    named_.push_back({"buffer", b.key(), b.value()});
    buffers_.push_back(b.value());
  }
  if (params_.empty()) throw ConfigError(c.rank(), "DistributedDataParallel: the module has no parameters");
  const auto device = params_.front().device();
  for (const auto& t : params_) {
    if (t.device() != device) {
      throw ConfigError(c.rank(), "DistributedDataParallel: parameters on several devices (" + device.str() + ", " +
                                      t.device().str() + ") are not supported; move the module to one device");
    }
  }
  monitor_ = &current_step_monitor();
  monitor_->set_identity(c.rank(), c.world_size(), c.env().restart_count);
  if (device.is_cuda()) monitor_->note_cuda_device(std::max<int>(0, device.index()));
  sequence_ = ContextInternals::next_sequence(c);
  connect();
  // Released before a rejoin: the old reducer's hooks go, and with it what it holds of the old groups.
  rejoin_listener_ = ContextInternals::add_rejoin_listener(
      c, "DistributedDataParallel", [this] { reducer_.reset(); }, [this] { connect(); });
}

DataParallelCore::~DataParallelCore() {
  if (rejoin_listener_ >= 0) ContextInternals::remove_rejoin_listener(*ctx_, rejoin_listener_);
}

void DataParallelCore::before_forward() {
  if (options_.broadcast_buffers && !buffers_.empty() && ctx_->world_size() > 1 && module_->is_training()) {
    broadcast_from_rank0(*ctx_->group(buffers_.front().device()), buffers_,
                         static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024) + 1);
  }
}

bool DataParallelCore::forward_begin(int64_t samples) {
  // Only training forwards: an evaluation inside the loop stays in the phase it happens in.
  if (!monitor_->enabled() || !torch::GradMode::is_enabled() || !module_->is_training()) return false;
  monitor_->forward_begin(samples);
  return true;
}

void DataParallelCore::forward_end(bool marked) {
  if (marked) monitor_->mark(Phase::backward);
}

void DataParallelCore::set_sync(bool enabled) { reducer_->set_sync(enabled); }
bool DataParallelCore::sync_enabled() const { return reducer_->sync_enabled(); }
DDPStats DataParallelCore::stats() const { return reducer_->stats(); }
std::vector<std::vector<std::string>> DataParallelCore::bucket_layout() const { return reducer_->bucket_layout(); }

RankState DataParallelCore::hook_state() const {
  return options_.comm_hook ? options_.comm_hook->state() : RankState{};
}

void DataParallelCore::load_hook_state(const RankState& saved, bool same_world) {
  const int rank = ctx_->rank();
  if (!options_.comm_hook) {
    if (!saved.empty())
      log_warn("the checkpoint holds a DDP comm hook's state (" + saved.text.substr(0, 80) +
               "); this model has no comm hook: not used");
    return;
  }
  try {
    options_.comm_hook->load_state(saved, same_world);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(rank, "the DDP comm hook '" + options_.comm_hook->describe() +
                                    "' cannot take the state in the checkpoint: " + e.what());
  }
}

void DataParallelCore::assert_in_sync() const {
  assert_same_values(*ctx_, params_, "DistributedDataParallel parameters");
}

}  // namespace cohort::detail
