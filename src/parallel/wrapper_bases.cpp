// The module wrappers' non-template bases (DataParallelBase, ShardedBase, LocalSGDBase): each call
// goes to its core (data_parallel_core.h, sharded_core.h, local_sgd_core.h), which the public
// headers only name.
#include "parallel/ddp/data_parallel_core.h"
#include "local_sgd_core.h"
#include "parallel/sharded/sharded_core.h"

namespace cohort {

// --- DataParallelBase ------------------------------------------------------------------------------

DataParallelBase::DataParallelBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                                   DDPOptions options)
    : core_(std::make_unique<detail::DataParallelCore>(std::move(module), std::move(ctx), std::move(options))) {}
DataParallelBase::~DataParallelBase() = default;
bool DataParallelBase::sync_enabled() const { return core_->sync_enabled(); }
void DataParallelBase::set_sync_enabled(bool enabled) { core_->set_sync(enabled); }
void DataParallelBase::assert_in_sync() const { core_->assert_in_sync(); }
DDPStats DataParallelBase::stats() const { return core_->stats(); }
std::vector<std::vector<std::string>> DataParallelBase::bucket_layout() const { return core_->bucket_layout(); }
RankState DataParallelBase::rank_state() { return core_->hook_state(); }
void DataParallelBase::load_rank_state(const RankState& saved, bool same_world) {
  core_->load_hook_state(saved, same_world);
}
void DataParallelBase::before_forward() { core_->before_forward(); }
bool DataParallelBase::forward_begin(int64_t samples) { return core_->forward_begin(samples); }
void DataParallelBase::forward_end(bool marked) { core_->forward_end(marked); }

// --- ShardedBase -----------------------------------------------------------------------------------

ShardedBase::ShardedBase(std::shared_ptr<torch::nn::Module> module, bool is_sequential, std::shared_ptr<Context> ctx,
                         ShardedOptions options)
    : core_(std::make_unique<detail::ShardedCore>(std::move(module), is_sequential, std::move(ctx), std::move(options))) {}
ShardedBase::~ShardedBase() = default;
bool ShardedBase::sync_enabled() const { return core_->sync_enabled(); }
void ShardedBase::set_sync_enabled(bool enabled) { core_->set_sync(enabled); }
double ShardedBase::clip_grad_norm(double max_norm, double norm_type) { return core_->clip_grad_norm(max_norm, norm_type); }
std::vector<torch::Tensor> ShardedBase::shard_masks(
    const std::function<bool(const std::string&, c10::IntArrayRef)>& select) const {
  return core_->shard_masks(select);
}
ShardedStats ShardedBase::stats() const { return core_->stats(); }
std::vector<std::vector<std::string>> ShardedBase::unit_layout() const { return core_->unit_layout(); }
ShardState ShardedBase::shard_state(const torch::optim::Optimizer* optimizer) {
  return core_->checkpointable().shard_state(optimizer);
}
NamedTensorList ShardedBase::replicated_tensors() { return core_->checkpointable().replicated_tensors(); }
void ShardedBase::load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) {
  core_->checkpointable().load_shard_state(source, optimizer);
}
FullState ShardedBase::full_state(const torch::optim::Optimizer* optimizer) {
  return core_->checkpointable().full_state(optimizer);
}
const std::vector<torch::Tensor>& ShardedBase::shards() const { return core_->shards(); }
void ShardedBase::before_forward() { core_->before_forward(); }
bool ShardedBase::runs_units() const { return core_->runs_units(); }
torch::Tensor ShardedBase::forward_sequential(torch::Tensor x) { return core_->forward_sequential(std::move(x)); }
void ShardedBase::after_forward() { core_->after_forward(); }
bool ShardedBase::forward_begin(int64_t samples) { return core_->forward_begin(samples); }
void ShardedBase::forward_end(bool marked) { core_->forward_end(marked); }

// --- LocalSGDBase ----------------------------------------------------------------------------------

LocalSGDBase::LocalSGDBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                           LocalSGDOptions options)
    : core_(std::make_unique<detail::LocalSGDCore>(std::move(module), std::move(ctx), options)) {}
LocalSGDBase::~LocalSGDBase() = default;
bool LocalSGDBase::step() { return core_->step(); }
void LocalSGDBase::sync() { core_->sync(); }
bool LocalSGDBase::finish() { return core_->finish(); }
LocalSGDStats LocalSGDBase::stats() const { return core_->stats(); }
ShardState LocalSGDBase::shard_state(const torch::optim::Optimizer* optimizer) { return core_->shard_state(optimizer); }
NamedTensorList LocalSGDBase::replicated_tensors() { return core_->replicated_tensors(); }
void LocalSGDBase::load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) {
  core_->load_shard_state(source, optimizer);
}
FullState LocalSGDBase::full_state(const torch::optim::Optimizer* optimizer) { return core_->full_state(optimizer); }
bool LocalSGDBase::forward_begin(int64_t samples) { return core_->forward_begin(samples); }
void LocalSGDBase::forward_end(bool marked) { core_->forward_end(marked); }

}  // namespace cohort
