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

struct LocalSGDCore::Impl {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Context> ctx;
  LocalSGDOptions options;
  int rank = 0, world = 1;
  std::vector<std::string> param_names, buffer_names;  // "module.<name>", as DDP's checkpoints
  std::vector<torch::Tensor> params, buffers;
  std::vector<torch::Tensor> averaged_buffers;  // the floating ones, of the parameters' dtype
  int64_t param_numel = 0;
  // nesterov: the parameters after the last synchronisation, and the outer momentum (flat, with
  // per-parameter views for checkpoints).
  torch::Tensor anchor, momentum;
  std::vector<torch::Tensor> anchor_views, momentum_views;
  torch::Tensor steps = torch::zeros({}, torch::kLong);  // 0-d: a checkpoint's replicated tensor
  std::unique_ptr<GroupHookComm> comm;
  StepMonitor* monitor = nullptr;
  int64_t syncs = 0;
  std::vector<NamedTensor> named;  // parameters and buffers, for the same-model check
  int64_t rejoin_listener = -1;

  // Everything the constructor does with the other ranks, in order: the same-model check, rank 0's
  // state to all (and the outer optimizer's start from it), the communicator. After a rejoin
  // (keep_running.h) the survivors do it again, meeting the replacement's constructor; the loop
  // then restores every rank's own state from the snapshot.
  void connect() {
    Context& c = *ctx;
    const auto device = params.front().device();
    check_same_model(c, named, settings_line(options), "LocalSGD");
    std::vector<torch::Tensor> state = params;
    state.insert(state.end(), buffers.begin(), buffers.end());
    broadcast_from_rank0(*c.group(device), state, int64_t{64} << 20);
    if (options.outer == OuterOptimizer::nesterov) {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> parts;
      for (const auto& p : params) parts.push_back(p.detach().reshape(-1));
      anchor = torch::cat(parts);
      momentum = torch::zeros_like(anchor);
      anchor_views = views_of(anchor);
      momentum_views = views_of(momentum);
    }
    comm = std::make_unique<GroupHookComm>(c.group(device), detail::ContextInternals::shm_allreduce(c), rank, world,
                                           "local sgd sync");
  }

  std::vector<torch::Tensor> views_of(const torch::Tensor& flat) const {
    std::vector<torch::Tensor> out;
    int64_t offset = 0;
    for (const auto& p : params) {
      out.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    return out;
  }

  void synchronise() {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (const auto& p : params) parts.push_back(p.detach().reshape(-1));
    for (const auto& b : averaged_buffers) parts.push_back(b.reshape(-1));
    auto flat = torch::cat(parts);
    comm->allreduce_sum(flat);
    flat.div_(world);
    auto averaged = flat.narrow(0, 0, param_numel);
    if (options.outer == OuterOptimizer::nesterov) {
      // torch.optim.SGD(nesterov=True, dampening=0) on the outer gradient g = anchor - average:
      // buf = mu * buf + g; anchor -= lr * (g + mu * buf). Zero-initialised, buf's first value is g.
      auto g = anchor - averaged;
      momentum.mul_(options.outer_momentum).add_(g);
      g.add_(momentum, options.outer_momentum);
      anchor.add_(g, -options.outer_lr);
      averaged.copy_(anchor);
    }
    int64_t offset = 0;
    for (auto& p : params) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    for (auto& b : averaged_buffers) {
      b.copy_(flat.narrow(0, offset, b.numel()).view(b.sizes()));
      offset += b.numel();
    }
    ++syncs;
  }
};

LocalSGDCore::LocalSGDCore(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Context> ctx,
                           LocalSGDOptions options)
    : impl_(std::make_unique<Impl>()) {
  COHORT_CHECK(ctx != nullptr, "LocalSGD needs a Context (cohort::init())");
  Impl& m = *impl_;
  m.module = std::move(module);
  m.ctx = std::move(ctx);
  m.options = options;
  Context& c = *m.ctx;
  m.rank = c.rank();
  m.world = c.world_size();
  check_options(options, m.rank);

  for (const auto& p : m.module->named_parameters(/*recurse=*/true)) {
    m.named.push_back({"parameter", p.key(), p.value()});
    m.param_names.push_back("module." + p.key());
    m.params.push_back(p.value());
  }
  if (m.params.empty()) throw ConfigError(m.rank, "LocalSGD: the module has no parameters");
  const auto& first = m.params.front();
  for (size_t i = 0; i < m.params.size(); ++i) {
    const auto& p = m.params[i];
    if (p.device() != first.device() || p.scalar_type() != first.scalar_type() || !p.is_floating_point())
      throw ConfigError(m.rank, "LocalSGD: parameter '" + m.named[i].name + "' is " + std::string(p.dtype().name()) +
                                    " on " + p.device().str() + " where the first is " +
                                    std::string(first.dtype().name()) + " on " + first.device().str() +
                                    "; the parameters must share one floating dtype and one device");
    m.param_numel += p.numel();
  }
  for (const auto& b : m.module->named_buffers(/*recurse=*/true)) {
    m.named.push_back({"buffer", b.key(), b.value()});
    m.buffer_names.push_back("module." + b.key());
    m.buffers.push_back(b.value());
    if (b.value().scalar_type() == first.scalar_type() && b.value().device() == first.device())
      m.averaged_buffers.push_back(b.value());
  }
  m.connect();
  // Released before a rejoin: the communicator holds the old groups.
  m.rejoin_listener = ContextInternals::add_rejoin_listener(
      c, "LocalSGD", [impl = impl_.get()] { impl->comm.reset(); }, [impl = impl_.get()] { impl->connect(); });
  m.monitor = &current_step_monitor();
  m.monitor->set_identity(c.rank(), c.world_size(), c.env().restart_count);
}

LocalSGDCore::~LocalSGDCore() {
  if (impl_->rejoin_listener >= 0) ContextInternals::remove_rejoin_listener(*impl_->ctx, impl_->rejoin_listener);
}

bool LocalSGDCore::forward_begin(int64_t samples) {
  Impl& m = *impl_;
  if (!m.monitor->enabled() || !torch::GradMode::is_enabled() || !m.module->is_training()) return false;
  m.monitor->forward_begin(samples);
  return true;
}

void LocalSGDCore::forward_end(bool marked) {
  if (marked) impl_->monitor->mark(Phase::backward);
}

bool LocalSGDCore::step() {
  Impl& m = *impl_;
  int64_t& steps = *m.steps.data_ptr<int64_t>();
  ++steps;
  if (steps % m.options.sync_every != 0) return false;
  sync();
  return true;
}

bool LocalSGDCore::finish() {
  Impl& m = *impl_;
  if (*m.steps.data_ptr<int64_t>() % m.options.sync_every == 0) return false;
  sync();
  return true;
}

void LocalSGDCore::sync() {
  Impl& m = *impl_;
  // Phases: backward and the inner step until here, the allreduce as comm_wait, the rest as optimizer.
  if (m.monitor->enabled()) m.monitor->mark(Phase::comm_wait);
  m.synchronise();
  if (m.monitor->enabled()) m.monitor->mark(Phase::optimizer);
}

LocalSGDStats LocalSGDCore::stats() const {
  const Impl& m = *impl_;
  return {*m.steps.data_ptr<int64_t>(), m.syncs, m.comm->bytes()};
}

// --- checkpoints -----------------------------------------------------------------------------------
// Shard files: "param/<name>", "param/<name>/<optimizer field>", "buffer/<name>" (this rank's);
// the replicated file: "local_sgd/steps", "local_sgd/anchor/<name>", "local_sgd/momentum/<name>".

ShardState LocalSGDCore::shard_state(const torch::optim::Optimizer* optimizer) {
  Impl& m = *impl_;
  ShardState s;
  std::vector<std::string> fields;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const std::string prefix = "param/" + m.param_names[i];
    s.tensors.emplace_back(prefix, m.params[i].detach());
    if (!optimizer) continue;
    const size_t before = s.tensors.size();
    ckpt::param_state_tensors(*optimizer, m.params[i], prefix, s.tensors, m.rank);
    for (size_t k = before; k < s.tensors.size(); ++k) {
      const std::string field = s.tensors[k].first.substr(prefix.size() + 1);
      if (std::find(fields.begin(), fields.end(), field) == fields.end()) fields.push_back(field);
    }
  }
  for (size_t i = 0; i < m.buffers.size(); ++i) s.tensors.emplace_back("buffer/" + m.buffer_names[i], m.buffers[i]);
  nlohmann::ordered_json j;
  j["local_sgd"] = {{"world_size", m.world},
                    {"sync_every", m.options.sync_every},
                    {"outer", outer_name(m.options.outer)},
                    {"params", m.param_names},
                    {"buffers", m.buffer_names},
                    {"optimizer_fields", fields}};
  s.layout_json = j.dump();
  if (optimizer) s.optimizer_json = ckpt::optimizer_description(*optimizer, m.rank);
  return s;
}

NamedTensorList LocalSGDCore::replicated_tensors() {
  Impl& m = *impl_;
  NamedTensorList out{{"local_sgd/steps", m.steps}};
  for (size_t i = 0; i < m.anchor_views.size(); ++i) {
    out.emplace_back("local_sgd/anchor/" + m.param_names[i], m.anchor_views[i]);
    out.emplace_back("local_sgd/momentum/" + m.param_names[i], m.momentum_views[i]);
  }
  return out;
}

void LocalSGDCore::load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) {
  Impl& m = *impl_;
  torch::NoGradGuard no_grad;
  nlohmann::json layout;
  try {
    layout = detail::parse_capped(source.layout_json()).at("local_sgd");
  } catch (const std::exception&) {
    throw CheckpointError(m.rank, "the checkpoint holds sharded state of ShardedDataParallel, not of LocalSGD");
  }
  int saved_world = 0;
  std::vector<std::string> saved_params, fields;
  try {
    saved_world = layout.at("world_size").get<int>();
    saved_params = layout.at("params").get<std::vector<std::string>>();
    fields = layout.at("optimizer_fields").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    throw CheckpointError(m.rank, std::string("the checkpoint's LocalSGD layout does not parse: ") + e.what());
  }
  if (saved_world < 1) throw CheckpointError(m.rank, "the checkpoint's LocalSGD layout has world size " + std::to_string(saved_world));
  if (saved_params != m.param_names)
    throw CheckpointError(m.rank, "the checkpoint's LocalSGD parameters are not this model's: it is of another model");
  if (optimizer && source.optimizer_json().empty())
    throw CheckpointError(m.rank, "the checkpoint holds no optimizer state, but an optimizer was given");
  const int q = m.rank % saved_world;  // the same rank on the same world size
  auto read = [&](const std::string& name, torch::Tensor into) {
    const auto t = source.tensor(q, name);
    if (!t.defined() || t.sizes() != into.sizes())
      throw CheckpointError(m.rank, "saved rank " + std::to_string(q) + "'s shard has no tensor \"" + name +
                                        "\" of this shape: the checkpoint is of another model");
    into.copy_(t);
  };
  for (size_t i = 0; i < m.params.size(); ++i) read("param/" + m.param_names[i], m.params[i].detach());
  for (size_t i = 0; i < m.buffers.size(); ++i) read("buffer/" + m.buffer_names[i], m.buffers[i]);
  if (!optimizer) return;
  for (size_t i = 0; i < m.params.size(); ++i) {
    std::map<std::string, torch::Tensor> state;
    for (const auto& field : fields) {
      const auto t = source.tensor(q, "param/" + m.param_names[i] + "/" + field);
      if (t.defined()) state[field] = t.clone();
    }
    ckpt::set_param_state(*optimizer, m.params[i], state, m.rank);
  }
  ckpt::apply_optimizer_description(*optimizer, source.optimizer_json(), m.rank);
}

FullState LocalSGDCore::full_state(const torch::optim::Optimizer* optimizer) {
  // This rank's own state: between synchronisations the ranks' states differ, and after one the
  // model is the same everywhere.
  Impl& m = *impl_;
  FullState out;
  for (size_t i = 0; i < m.params.size(); ++i) {
    out.model.emplace_back(m.param_names[i], m.params[i].detach().clone());
    if (!optimizer) continue;
    NamedTensorList fields;
    ckpt::param_state_tensors(*optimizer, m.params[i], m.param_names[i], fields, m.rank);
    for (auto& [name, t] : fields) out.optimizer.emplace_back(name, t.clone());
  }
  for (size_t i = 0; i < m.buffers.size(); ++i) out.model.emplace_back(m.buffer_names[i], m.buffers[i].clone());
  return out;
}

}  // namespace cohort::detail
