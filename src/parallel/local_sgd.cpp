// LocalSGDCore: construction checks and broadcast, the synchronisation (one allreduce of the
// parameters and floating buffers, then the outer step), and the checkpoint side. See
// cohort/local_sgd.h.
#include "local_sgd_core.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "checkpoint/format/training_state.h"
#include "cohort/context.h"
#include "cohort/error.h"
#include "parallel/comm_hooks/hook_comm.h"
#include "monitor/worker_monitor.h"
#include "parallel/ddp/replica_sync.h"
#include "runtime/check.h"
#include "runtime/context_internals.h"
#include "runtime/json_fields.h"

namespace cohort::detail {
namespace {

const char* outer_name(OuterOptimizer o) { return o == OuterOptimizer::nesterov ? "nesterov" : "average"; }

void check_options(const LocalSGDOptions& o, int rank) {
  if (o.sync_every < 1)
    throw ConfigError(rank, "LocalSGD: sync_every is " + std::to_string(o.sync_every) +
                                "; it must be at least 1 (the local steps between synchronisations)");
  if (o.outer == OuterOptimizer::nesterov) {
    if (!std::isfinite(o.outer_lr) || o.outer_lr <= 0)
      throw ConfigError(rank, "LocalSGD: outer_lr must be a positive number (got " + std::to_string(o.outer_lr) + ")");
    if (!std::isfinite(o.outer_momentum) || o.outer_momentum < 0 || o.outer_momentum >= 1)
      throw ConfigError(rank, "LocalSGD: outer_momentum must be in [0, 1) (got " + std::to_string(o.outer_momentum) + ")");
  }
}

std::string settings_line(const LocalSGDOptions& o) {
  std::ostringstream s;
  s << "local sgd every " << o.sync_every << " steps, outer " << outer_name(o.outer);
  if (o.outer == OuterOptimizer::nesterov) s << " lr " << o.outer_lr << " momentum " << o.outer_momentum;
  return s.str() + "\n";
}

}  // namespace

void LocalSGDCore::connect() {
  Context& c = *ctx_;
  const auto device = params_.front().device();
  check_same_model(c, named_, settings_line(options_), "LocalSGD");
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(*c.group(device), state, int64_t{64} << 20);
  if (options_.outer == OuterOptimizer::nesterov) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (const auto& p : params_) parts.push_back(p.detach().reshape(-1));
    anchor_ = torch::cat(parts);
    momentum_ = torch::zeros_like(anchor_);
    anchor_views_ = views_of(anchor_);
    momentum_views_ = views_of(momentum_);
  }
  comm_ = std::make_unique<GroupHookComm>(c.group(device), detail::ContextInternals::shm_allreduce(c), rank_, world_,
                                          "local sgd sync");
}

std::vector<torch::Tensor> LocalSGDCore::views_of(const torch::Tensor& flat) const {
  std::vector<torch::Tensor> out;
  int64_t offset = 0;
  for (const auto& p : params_) {
    out.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return out;
}

void LocalSGDCore::synchronise() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const auto& p : params_) parts.push_back(p.detach().reshape(-1));
  for (const auto& b : averaged_buffers_) parts.push_back(b.reshape(-1));
  auto flat = torch::cat(parts);
  comm_->allreduce_sum(flat);
  flat.div_(world_);
  auto averaged = flat.narrow(0, 0, param_numel_);
  if (options_.outer == OuterOptimizer::nesterov) {
    // torch.optim.SGD(nesterov=True, dampening=0) on the outer gradient g = anchor - average:
    // buf = mu * buf + g; anchor -= lr * (g + mu * buf). Zero-initialised, buf's first value is g.
    auto g = anchor_ - averaged;
    momentum_.mul_(options_.outer_momentum).add_(g);
    g.add_(momentum_, options_.outer_momentum);
    anchor_.add_(g, -options_.outer_lr);
    averaged.copy_(anchor_);
  }
  int64_t offset = 0;
  for (auto& p : params_) {
    p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  for (auto& b : averaged_buffers_) {
    b.copy_(flat.narrow(0, offset, b.numel()).view(b.sizes()));
    offset += b.numel();
  }
  ++syncs_;
}

LocalSGDCore::LocalSGDCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                           LocalSGDOptions options)
    : module_(std::move(module)), ctx_(std::move(ctx)), options_(options) {
  COHORT_CHECK(ctx_ != nullptr, "LocalSGD needs a Context (cohort::init())");
  Context& c = *ctx_;
  rank_ = c.rank();
  world_ = c.world_size();
  check_options(options, rank_);

  for (const auto& p : module_->named_parameters(/*recurse=*/true)) {
    named_.push_back({"parameter", p.key(), p.value()});
    param_names_.push_back("module." + p.key());
    params_.push_back(p.value());
  }
  if (params_.empty()) throw ConfigError(rank_, "LocalSGD: the module has no parameters");
  const auto& first = params_.front();
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (p.device() != first.device() || p.scalar_type() != first.scalar_type() || !p.is_floating_point())
      throw ConfigError(rank_, "LocalSGD: parameter '" + named_[i].name + "' is " + std::string(p.dtype().name()) +
                                   " on " + p.device().str() + " where the first is " +
                                   std::string(first.dtype().name()) + " on " + first.device().str() +
                                   "; the parameters must share one floating dtype and one device");
    param_numel_ += p.numel();
  }
  for (const auto& b : module_->named_buffers(/*recurse=*/true)) {
    named_.push_back({"buffer", b.key(), b.value()});
    buffer_names_.push_back("module." + b.key());
    buffers_.push_back(b.value());
    if (b.value().scalar_type() == first.scalar_type() && b.value().device() == first.device())
      averaged_buffers_.push_back(b.value());
  }
  connect();
  // Released before a rejoin: the communicator holds the old groups.
  rejoin_listener_ = ContextInternals::add_rejoin_listener(
      c, "LocalSGD", [this] { comm_.reset(); }, [this] { connect(); });
  monitor_ = &current_step_monitor();
  monitor_->set_identity(c.rank(), c.world_size(), c.env().restart_count);
}

LocalSGDCore::~LocalSGDCore() {
  if (rejoin_listener_ >= 0) ContextInternals::remove_rejoin_listener(*ctx_, rejoin_listener_);
}

bool LocalSGDCore::forward_begin(int64_t samples) {
  if (!monitor_->enabled() || !torch::GradMode::is_enabled() || !module_->is_training()) return false;
  monitor_->forward_begin(samples);
  return true;
}

void LocalSGDCore::forward_end(bool marked) {
  if (marked) monitor_->mark(Phase::backward);
}

bool LocalSGDCore::step() {
  int64_t& steps = *steps_.data_ptr<int64_t>();
  ++steps;
  if (steps % options_.sync_every != 0) return false;
  sync();
  return true;
}

bool LocalSGDCore::finish() {
  if (*steps_.data_ptr<int64_t>() % options_.sync_every == 0) return false;
  sync();
  return true;
}

void LocalSGDCore::sync() {
  // Phases: backward and the inner step until here, the allreduce as comm_wait, the rest as optimizer.
  if (monitor_->enabled()) monitor_->mark(Phase::comm_wait);
  synchronise();
  if (monitor_->enabled()) monitor_->mark(Phase::optimizer);
}

LocalSGDStats LocalSGDCore::stats() const {
  return {*steps_.data_ptr<int64_t>(), syncs_, comm_->bytes()};
}

// --- checkpoints -----------------------------------------------------------------------------------
// Shard files: "param/<name>", "param/<name>/<optimizer field>", "buffer/<name>" (this rank's);
// the replicated file: "local_sgd/steps", "local_sgd/anchor/<name>", "local_sgd/momentum/<name>".

ShardState LocalSGDCore::shard_state(const torch::optim::Optimizer* optimizer) {
  ShardState s;
  std::vector<std::string> fields;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "param/" + param_names_[i];
    s.tensors.emplace_back(prefix, params_[i].detach());
    if (!optimizer) continue;
    const size_t before = s.tensors.size();
    ckpt::param_state_tensors(*optimizer, params_[i], prefix, s.tensors, rank_);
    for (size_t k = before; k < s.tensors.size(); ++k) {
      const std::string field = s.tensors[k].first.substr(prefix.size() + 1);
      if (std::find(fields.begin(), fields.end(), field) == fields.end()) fields.push_back(field);
    }
  }
  for (size_t i = 0; i < buffers_.size(); ++i) s.tensors.emplace_back("buffer/" + buffer_names_[i], buffers_[i]);
  nlohmann::ordered_json j;
  j["local_sgd"] = {{"world_size", world_},
                    {"sync_every", options_.sync_every},
                    {"outer", outer_name(options_.outer)},
                    {"params", param_names_},
                    {"buffers", buffer_names_},
                    {"optimizer_fields", fields}};
  s.layout_json = j.dump();
  if (optimizer) s.optimizer_json = ckpt::optimizer_description(*optimizer, rank_);
  return s;
}

NamedTensorList LocalSGDCore::replicated_tensors() {
  NamedTensorList out{{"local_sgd/steps", steps_}};
  for (size_t i = 0; i < anchor_views_.size(); ++i) {
    out.emplace_back("local_sgd/anchor/" + param_names_[i], anchor_views_[i]);
    out.emplace_back("local_sgd/momentum/" + param_names_[i], momentum_views_[i]);
  }
  return out;
}

void LocalSGDCore::load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) {
  torch::NoGradGuard no_grad;
  nlohmann::json layout;
  try {
    layout = detail::parse_capped(source.layout_json()).at("local_sgd");
  } catch (const std::exception&) {
    throw CheckpointError(rank_, "the checkpoint holds sharded state of ShardedDataParallel, not of LocalSGD");
  }
  int saved_world = 0;
  std::vector<std::string> saved_params, fields;
  try {
    saved_world = layout.at("world_size").get<int>();
    saved_params = layout.at("params").get<std::vector<std::string>>();
    fields = layout.at("optimizer_fields").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    throw CheckpointError(rank_, std::string("the checkpoint's LocalSGD layout does not parse: ") + e.what());
  }
  if (saved_world < 1) throw CheckpointError(rank_, "the checkpoint's LocalSGD layout has world size " + std::to_string(saved_world));
  if (saved_params != param_names_)
    throw CheckpointError(rank_, "the checkpoint's LocalSGD parameters are not this model's: it is of another model");
  if (optimizer && source.optimizer_json().empty())
    throw CheckpointError(rank_, "the checkpoint holds no optimizer state, but an optimizer was given");
  const int q = rank_ % saved_world;  // the same rank on the same world size
  auto read = [&](const std::string& name, torch::Tensor into) {
    const auto t = source.tensor(q, name);
    if (!t.defined() || t.sizes() != into.sizes())
      throw CheckpointError(rank_, "saved rank " + std::to_string(q) + "'s shard has no tensor \"" + name +
                                       "\" of this shape: the checkpoint is of another model");
    into.copy_(t);
  };
  for (size_t i = 0; i < params_.size(); ++i) read("param/" + param_names_[i], params_[i].detach());
  for (size_t i = 0; i < buffers_.size(); ++i) read("buffer/" + buffer_names_[i], buffers_[i]);
  if (!optimizer) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::map<std::string, torch::Tensor> state;
    for (const auto& field : fields) {
      const auto t = source.tensor(q, "param/" + param_names_[i] + "/" + field);
      if (t.defined()) state[field] = t.clone();
    }
    ckpt::set_param_state(*optimizer, params_[i], state, rank_);
  }
  ckpt::apply_optimizer_description(*optimizer, source.optimizer_json(), rank_);
}

FullState LocalSGDCore::full_state(const torch::optim::Optimizer* optimizer) {
  // This rank's own state: between synchronisations the ranks' states differ, and after one the
  // model is the same everywhere.
  FullState out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.model.emplace_back(param_names_[i], params_[i].detach().clone());
    if (!optimizer) continue;
    NamedTensorList fields;
    ckpt::param_state_tensors(*optimizer, params_[i], param_names_[i], fields, rank_);
    for (auto& [name, t] : fields) out.optimizer.emplace_back(name, t.clone());
  }
  for (size_t i = 0; i < buffers_.size(); ++i) out.model.emplace_back(buffer_names_[i], buffers_[i].clone());
  return out;
}

}  // namespace cohort::detail
