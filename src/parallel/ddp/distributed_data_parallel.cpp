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

struct DataParallelCore::Impl {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Context> ctx;
  DDPOptions options;
  std::vector<torch::Tensor> params;   // all parameters (broadcast, in-sync check)
  std::vector<torch::Tensor> buffers;
  std::shared_ptr<GradReducer> reducer;
  std::vector<NamedTensor> named;              // parameters and buffers, for the same-model check
  std::vector<GradReducer::Param> trainable;   // what the reducer averages
  StepMonitor* monitor = nullptr;  // the one current at construction (cohort/monitor.h)
  int64_t rejoin_listener = -1;
  // Names this DDP's keys in the store (the hierarchical allreduce's), taken once at construction:
  // after a rejoin the survivors' connect() must use the number the replacement's constructor
  // takes, and both took it in the same order of construction.
  int64_t sequence = 0;

  // Everything the constructor does with the other ranks, in order: the same-model check, rank 0's
  // state to all, the choice of allreduce, the reducer. After a rejoin (keep_running.h) the
  // survivors do it again, meeting the replacement's constructor.
  void connect();
};

void DataParallelCore::Impl::connect() {
  Context& c = *ctx;
  const auto device = params.front().device();
  const char* algos[] = {"automatic", "flat", "hierarchical"};
  check_same_model(c, named,
                   "comm hook '" + (options.comm_hook ? options.comm_hook->describe() : "none") + "'\n" +
                       "allreduce '" + algos[static_cast<int>(options.allreduce)] + "'\n");
  std::vector<torch::Tensor> state = params;
  state.insert(state.end(), buffers.begin(), buffers.end());
  broadcast_from_rank0(*c.group(device), state, static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024) + 1);
  std::unique_ptr<ReducerComm> comm;
  if (!options.reference_mode && device.is_cpu() && options.allreduce != AllreduceAlgo::flat) {
    std::string why;
    comm = HierarchicalComm::create(c, sequence, why);  // collective; null on every rank alike
    if (!comm && options.allreduce == AllreduceAlgo::hierarchical) {
      throw ConfigError(c.rank(), "DDP allreduce 'hierarchical' is not possible in this job: " + why);
    }
  }
  reducer = GradReducer::create(trainable, c.group(device), detail::ContextInternals::shm_allreduce(c), c.rank(),
                                c.world_size(), options, monitor, std::move(comm));
}

DataParallelCore::DataParallelCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                                   DDPOptions options)
    : impl_(std::make_unique<Impl>()) {
  COHORT_CHECK(ctx != nullptr, "DistributedDataParallel needs a Context (cohort::init())");
  impl_->module = std::move(module);
  impl_->ctx = std::move(ctx);
  impl_->options = options;
  Context& c = *impl_->ctx;

  std::vector<NamedTensor>& named = impl_->named;
  std::vector<GradReducer::Param>& trainable = impl_->trainable;
  for (const auto& p : impl_->module->named_parameters(/*recurse=*/true)) {
    named.push_back({"parameter", p.key(), p.value()});
    impl_->params.push_back(p.value());
    if (p.value().requires_grad()) trainable.push_back({p.key(), p.value()});
  }
  for (const auto& b : impl_->module->named_buffers(/*recurse=*/true)) {
    named.push_back({"buffer", b.key(), b.value()});
    impl_->buffers.push_back(b.value());
  }
  if (impl_->params.empty()) throw ConfigError(c.rank(), "DistributedDataParallel: the module has no parameters");
  const auto device = impl_->params.front().device();
  for (const auto& t : impl_->params) {
    if (t.device() != device) {
      throw ConfigError(c.rank(), "DistributedDataParallel: parameters on several devices (" + device.str() + ", " +
                                      t.device().str() + ") are not supported; move the module to one device");
    }
  }
  impl_->monitor = &current_step_monitor();
  impl_->monitor->set_identity(c.rank(), c.world_size(), c.env().restart_count);
  if (device.is_cuda()) impl_->monitor->note_cuda_device(std::max<int>(0, device.index()));
  impl_->sequence = ContextInternals::next_sequence(c);
  impl_->connect();
  // Released before a rejoin: the old reducer's hooks go, and with it what it holds of the old groups.
  impl_->rejoin_listener = ContextInternals::add_rejoin_listener(
      c, "DistributedDataParallel", [impl = impl_.get()] { impl->reducer.reset(); }, [impl = impl_.get()] { impl->connect(); });
}

DataParallelCore::~DataParallelCore() {
  if (impl_->rejoin_listener >= 0) ContextInternals::remove_rejoin_listener(*impl_->ctx, impl_->rejoin_listener);
}

void DataParallelCore::before_forward() {
  if (impl_->options.broadcast_buffers && !impl_->buffers.empty() && impl_->ctx->world_size() > 1 &&
      impl_->module->is_training()) {
    broadcast_from_rank0(*impl_->ctx->group(impl_->buffers.front().device()), impl_->buffers,
                         static_cast<int64_t>(impl_->options.bucket_cap_mb * 1024 * 1024) + 1);
  }
}

bool DataParallelCore::forward_begin(int64_t samples) {
  // Only training forwards: an evaluation inside the loop stays in the phase it happens in.
  if (!impl_->monitor->enabled() || !torch::GradMode::is_enabled() || !impl_->module->is_training()) return false;
  impl_->monitor->forward_begin(samples);
  return true;
}

void DataParallelCore::forward_end(bool marked) {
  if (marked) impl_->monitor->mark(Phase::backward);
}

void DataParallelCore::set_sync(bool enabled) { impl_->reducer->set_sync(enabled); }
bool DataParallelCore::sync_enabled() const { return impl_->reducer->sync_enabled(); }
DDPStats DataParallelCore::stats() const { return impl_->reducer->stats(); }
std::vector<std::vector<std::string>> DataParallelCore::bucket_layout() const { return impl_->reducer->bucket_layout(); }

RankState DataParallelCore::hook_state() const {
  return impl_->options.comm_hook ? impl_->options.comm_hook->state() : RankState{};
}

void DataParallelCore::load_hook_state(const RankState& saved, bool same_world) {
  const int rank = impl_->ctx->rank();
  if (!impl_->options.comm_hook) {
    if (!saved.empty())
      log_warn("the checkpoint holds a DDP comm hook's state (" + saved.text.substr(0, 80) +
               "); this model has no comm hook: not used");
    return;
  }
  try {
    impl_->options.comm_hook->load_state(saved, same_world);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(rank, "the DDP comm hook '" + impl_->options.comm_hook->describe() +
                                    "' cannot take the state in the checkpoint: " + e.what());
  }
}

void DataParallelCore::assert_in_sync() const {
  assert_same_values(*impl_->ctx, impl_->params, "DistributedDataParallel parameters");
}

}  // namespace cohort::detail
