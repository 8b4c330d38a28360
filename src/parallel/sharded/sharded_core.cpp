// ShardedCore: construction (plan, checks, broadcast, flat units, hooks), forward (gathers), and
// backward (reductions). The schedule is in sharded_core_impl.h; the public contract in
// include/cohort/sharded_data_parallel.h.
#include "sharded_core_impl.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>

#include <cmath>

#include "parallel/autograd_hooks.h"
#include "cohort/error.h"
#include "parallel/ddp/replica_sync.h"
#include "runtime/check.h"
#include "runtime/context_internals.h"

namespace cohort::detail {

// --- construction --------------------------------------------------------------------------------

ShardedCore::ShardedCore(std::shared_ptr<torch::nn::Module> module, bool is_sequential, std::shared_ptr<Context> ctx,
                         ShardedOptions options)
    : impl_(std::make_shared<Impl>()) {
  if (!ctx) throw ConfigError(-1, "ShardedDataParallel needs the Context from cohort::init()");
  Impl& m = *impl_;
  m.module = std::move(module);
  m.ctx = std::move(ctx);
  m.options = std::move(options);
  m.rank = m.ctx->rank();
  m.world = m.ctx->world_size();
  m.level3 = m.options.level == ShardingLevel::parameters;
  Context& c = *m.ctx;

  // Everything that can be wrong with the options is found before the first collective, so every
  // rank throws the same ConfigError instead of some waiting for the others.
  m.plan = plan_units(*m.module, is_sequential, m.options, m.rank);
  const auto device = m.plan.units.front().params.front().device();
  std::vector<NamedTensor> named;
  std::vector<torch::Tensor> all;
  for (const auto& p : m.module->named_parameters(true)) {
    named.push_back({"parameter", p.key(), p.value()});
    all.push_back(p.value());
    if (!p.value().requires_grad()) m.replicated.emplace_back("module." + p.key(), p.value());
  }
  for (const auto& b : m.module->named_buffers(true)) {
    named.push_back({"buffer", b.key(), b.value()});
    all.push_back(b.value());
    m.replicated.emplace_back("module." + b.key(), b.value());
  }
  m.signature = model_signature(named);
  for (const auto& t : all)  // one element each, seen with the original shape
    m.placeholders.push_back(torch::zeros({}, t.options().requires_grad(false)).expand(t.sizes()));
  // A replacement of a lost rank (a spare given a later generation) trains only once restored.
  m.needs_restore = c.generation() > 0;
  m.connect(all, /*write_back=*/true);

  if (m.plan.per_child) {
    m.child_unit.assign(m.module->children().size(), -1);
    for (size_t u = 0; u < m.plan.units.size(); ++u)
      for (int ch = m.plan.units[u].first_child; ch <= m.plan.units[u].last_child; ++ch) m.child_unit[ch] = static_cast<int>(u);
  }
  // Flat units: the parameters move into them one unit at a time (each old storage is freed when
  // its parameter is rebound), so construction needs about one unit more than the module itself.
  for (size_t u = 0; u < m.plan.units.size(); ++u) {
    std::vector<FlatParam> params;
    for (size_t i = 0; i < m.plan.units[u].params.size(); ++i)
      params.push_back({m.plan.units[u].param_names[i], m.plan.units[u].params[i]});
    auto unit = std::make_unique<FlatUnit>(std::move(params), m.rank, m.world, /*own_shard=*/m.level3);
    unit->copy_params_into_full();
    unit->bind_params();
    unit->shard_from_full();
    if (m.level3) {
      unit->release();
    } else {
      unit->gathered_version = unit->shard()._version();
    }
    for (size_t i = 0; i < unit->params().size(); ++i) m.slots.push_back({u, i, false, nullptr, 0});
    m.shards.push_back(unit->shard());
    m.units.push_back(std::move(unit));
  }
  m.monitor = &current_step_monitor();
  m.monitor->set_identity(m.rank, m.world, c.env().restart_count);
  if (device.is_cuda()) m.monitor->note_cuda_device(std::max<int>(0, device.index()));
  m.state.resize(m.units.size());
  m.stats.num_units = static_cast<int64_t>(m.units.size());
  m.attach_hooks();
  m.rejoin_listener = ContextInternals::add_rejoin_listener(
      c, "the sharded model", [impl = impl_.get()] { impl->let_go(); }, [impl = impl_.get()] { impl->reconnect(); });
}

ShardedCore::~ShardedCore() {
  if (impl_->rejoin_listener >= 0) ContextInternals::remove_rejoin_listener(*impl_->ctx, impl_->rejoin_listener);
}

ShardedCore::Impl::~Impl() {
  queue.reset();  // finishes what is in flight before the tensors it uses go
  for (auto& s : slots)
    if (s.accumulator && s.hook_key) s.accumulator->del_post_hook(s.hook_key);
}

void ShardedCore::Impl::attach_hooks() {
  std::weak_ptr<Impl> weak = shared_from_this();
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto& param = units[slots[i].unit]->params()[slots[i].index].param;
    auto acc = torch::autograd::impl::grad_accumulator(param);
    COHORT_CHECK(acc != nullptr, "parameter without a gradient accumulator");
    slots[i].hook_key = acc->add_post_hook(std::make_unique<GradReadyHook>([weak, i] {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    }));
    slots[i].accumulator = std::move(acc);
  }
}

const std::vector<torch::Tensor>& ShardedCore::shards() const { return impl_->shards; }
bool ShardedCore::runs_units() const { return impl_->plan.per_child; }
ShardedCheckpointable& ShardedCore::checkpointable() { return *impl_; }

void ShardedCore::set_sync(bool enabled) {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  impl_->sync = enabled;
}
bool ShardedCore::sync_enabled() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  return impl_->sync;
}
ShardedStats ShardedCore::stats() const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  return impl_->stats;
}
std::vector<std::vector<std::string>> ShardedCore::unit_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& u : impl_->plan.units) out.push_back(u.param_names);
  return out;
}

// --- gathers ---------------------------------------------------------------------------------------

void ShardedCore::Impl::wait(std::shared_future<void>& f) {
  f.get();  // rethrows the collective's CommError
}

void ShardedCore::Impl::request_gather(size_t u) {
  FlatUnit& f = *units[u];
  UnitState& st = state[u];
  const int64_t version = f.shard()._version();
  if (st.gather_pending || (f.allocated() && f.gathered_version == version && !f.stale)) return;
  f.allocate();
  auto full = f.full_alias();
  auto shard = f.shard().detach();
  ShardCollectives* c = coll.get();
  st.gather = queue->submit([c, shard, full] { c->allgather(shard, full); });
  st.gather_pending = true;
  f.gathered_version = version;
  f.stale = false;
  stats.unit_gathers++;
  stats.bytes_gathered += f.padded() * static_cast<int64_t>(full.element_size());
  int64_t held = 0;
  for (const auto& unit : units) held += unit->allocated() ? 1 : 0;
  if (level3) stats.max_units_gathered = std::max(stats.max_units_gathered, held);
}

void ShardedCore::Impl::ensure_gathered(size_t u) {
  request_gather(u);
  if (state[u].gather_pending) {
    state[u].gather_pending = false;
    wait(state[u].gather);
  }
}

void ShardedCore::Impl::release(size_t u) {
  if (!level3) return;
  if (state[u].gather_pending) {  // a prefetch nobody used: let it land first
    state[u].gather_pending = false;
    wait(state[u].gather);
  }
  units[u]->release();
}

void ShardedCore::Impl::broadcast_buffers() {
  if (!options.broadcast_buffers || world == 1 || !module->is_training()) return;
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module->buffers(true)) buffers.push_back(b);
  if (buffers.empty()) return;
  // Through the queue: Gloo pairs collectives by issue order, and gathers may be in flight.
  auto group = ctx->group(buffers.front().device());
  queue->submit([group, buffers] { broadcast_from_rank0(*group, buffers, 64 << 20); }).get();
}

// --- forward ---------------------------------------------------------------------------------------

void ShardedCore::before_forward() {
  Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lock(m.mu);
  m.require_state();
  m.broadcast_buffers();
  // Levels 1, 2 (and level 3 with one unit): every unit whose shard changed since it was gathered.
  for (size_t u = 0; u < m.units.size(); ++u) m.request_gather(u);
  for (size_t u = 0; u < m.units.size(); ++u) m.ensure_gathered(u);
}

bool ShardedCore::forward_begin(int64_t samples) {
  Impl& m = *impl_;
  if (!m.monitor->enabled() || !torch::GradMode::is_enabled() || !m.module->is_training()) return false;
  m.monitor->forward_begin(samples);
  return true;
}

void ShardedCore::forward_end(bool marked) {
  if (marked) impl_->monitor->mark(Phase::backward);
}

void ShardedCore::after_forward() {
  Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lock(m.mu);
  // Level 3 with one unit: without autograd there is no backward to keep the parameters for.
  if (m.level3 && !torch::GradMode::is_enabled()) m.release(0);
}

torch::Tensor ShardedCore::forward_sequential(torch::Tensor x) {
  Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lock(m.mu);
  m.require_state();
  m.broadcast_buffers();
  auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(m.module.get());
  COHORT_CHECK(seq != nullptr, "forward_sequential without a Sequential");
  const bool recording = torch::GradMode::is_enabled();
  const size_t last = m.units.size() - 1;
  std::weak_ptr<Impl> weak = m.shared_from_this();
  int child = 0;
  for (auto& any : *seq) {
    const int u = m.child_unit[child];
    static const UnitPlan::Unit kNoUnit{};
    const UnitPlan::Unit& unit = u >= 0 ? m.plan.units[u] : kNoUnit;  // a reference either way: no copy
    if (u >= 0 && child == unit.first_child) {
      m.ensure_gathered(u);
      if (m.options.prefetch && static_cast<size_t>(u) < last) m.request_gather(u + 1);
    }
    x = any.forward(x);
    if (u >= 0 && child == unit.last_child) {
      if (recording && x.requires_grad()) {
        // Runs when the gradient of this unit's output is known: just before the unit's backward.
        x.register_hook([weak, u](const torch::Tensor&) {
          if (auto self = weak.lock()) self->pre_backward(static_cast<size_t>(u));
        });
      }
      // The last unit stays: backward starts with it; so do kept units (keep_gathered).
      if (!unit.keep_gathered && !(recording && static_cast<size_t>(u) == last)) m.release(u);
    }
    ++child;
  }
  if (!recording) {  // no backward to keep them for
    for (size_t u = 0; u < m.units.size(); ++u)
      if (m.plan.units[u].keep_gathered) m.release(u);
  }
  return x;
}

// --- backward --------------------------------------------------------------------------------------

void ShardedCore::Impl::begin_iteration() {
  in_backward = true;
  next_reduce = static_cast<int>(units.size()) - 1;
  for (auto& st : state) {
    st.fired = 0;
    st.ready = false;
  }
  std::weak_ptr<Impl> weak = shared_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto self = weak.lock()) {
      std::lock_guard<std::recursive_mutex> lock(self->mu);
      self->finish_iteration();
    }
  });
}

void ShardedCore::Impl::pre_backward(size_t u) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (!in_backward) begin_iteration();
  ensure_gathered(u);
  if (options.prefetch && u > 0) request_gather(u - 1);
}

void ShardedCore::Impl::on_grad_ready(size_t i) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  if (!in_backward) begin_iteration();
  Slot& slot = slots[i];
  if (slot.fired) {
    reset_iteration();
    throw ConfigError(rank, "ShardedDataParallel: parameter '" + units[slot.unit]->params()[slot.index].name +
                                "' received its gradient twice in one backward pass; re-entrant or retain_graph "
                                "backward is not supported");
  }
  slot.fired = true;
  if (++state[slot.unit].fired == units[slot.unit]->params().size()) unit_grads_done(slot.unit);
}

void ShardedCore::Impl::unit_grads_done(size_t u) {
  if (level3) release(u);  // its backward is over: the gradients are all that is left of it
  if (!sync) return;       // no_sync: the full gradients stay on the parameters and accumulate
  state[u].ready = true;
  launch_ready();
}

void ShardedCore::Impl::launch_ready() {
  // Strictly in reverse unit order, so every rank submits the same reductions in the same order.
  while (next_reduce >= 0 && state[next_reduce].ready) launch(static_cast<size_t>(next_reduce--));
}

void ShardedCore::Impl::launch(size_t u) {
  torch::NoGradGuard no_grad;
  FlatUnit& f = *units[u];
  UnitState& st = state[u];
  while (in_flight.size() >= kMaxInFlight) {  // bounds the flat gradients alive at once
    auto& oldest = state[in_flight.front()].reduction;
    in_flight.pop_front();
    wait(oldest);
  }
  const bool level1 = options.level == ShardingLevel::optimizer_state;
  if (level1 && !st.grad_full.defined()) st.grad_full = torch::zeros({f.padded()}, f.shard().options().requires_grad(false));
  torch::Tensor flat = level1 ? st.grad_full : torch::empty({f.padded()}, f.shard().options().requires_grad(false));
  for (const auto& p : f.params()) {
    auto region = flat.narrow(0, p.offset, p.numel);
    const auto& g = p.param.grad();
    if (g.defined()) {
      region.copy_(g.reshape(-1));
    } else {
      region.zero_();  // no gradient on this rank: contributes zeros
    }
    p.param.mutable_grad() = torch::Tensor();  // consumed: the shard's gradient carries it on
  }
  if (f.padded() > f.numel()) flat.narrow(0, f.numel(), f.padded() - f.numel()).zero_();
  if (in_backward) stats.reductions_in_backward++;
  stats.bytes_reduced += f.padded() * static_cast<int64_t>(flat.element_size());

  ShardCollectives* c = coll.get();
  const torch::Tensor shard = f.shard();
  const int64_t begin = f.shard_begin(), size = f.shard_size();
  st.reduction = queue->submit([c, flat, shard, begin, size, level1] {
    torch::NoGradGuard guard;
    torch::Tensor part;
    if (level1) {
      // Only the shard's part of the average is ever read, so a reduce-scatter into it suffices
      // (shared memory: about half an allreduce's copying; a ring: half its bytes).
      part = flat.narrow(0, begin, size);
      c->reduce_scatter_avg(flat, part);
    } else {
      part = torch::empty({size}, flat.options());
      c->reduce_scatter_avg(flat, part);
    }
    // Accumulates like AccumulateGrad does: gradients add up until the optimizer's zero_grad.
    auto& grad = const_cast<torch::Tensor&>(shard).mutable_grad();
    if (!grad.defined()) {
      grad = level1 ? part.clone() : part;
    } else {
      grad.add_(part);
    }
  });
  in_flight.push_back(u);
}

void ShardedCore::Impl::finish_iteration() {
  OnExit reset{[this] { reset_iteration(); }};
  if (sync) monitor->mark(Phase::comm_wait);  // backward compute ends here
  std::exception_ptr error;
  if (sync) {
    // Units some of whose parameters got no gradient in this backward.
    for (size_t u = 0; u < units.size(); ++u) {
      if (state[u].ready) continue;
      if (level3) release(u);
      state[u].ready = true;
    }
    launch_ready();
  }
  for (size_t u = 0; u < units.size(); ++u) {
    try {
      if (state[u].reduction.valid()) wait(state[u].reduction);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    state[u].reduction = {};
    if (level3) {
      try {
        release(u);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
  }
  if (sync) {
    stats.sync_iterations++;
    for (auto& unit : units) unit->stale = true;  // the optimizer steps next
    monitor->mark(Phase::optimizer);              // communication is done
  }
  if (error) std::rethrow_exception(error);
}

void ShardedCore::Impl::reset_iteration() {
  in_backward = false;
  in_flight.clear();
  for (auto& s : slots) s.fired = false;
  for (auto& st : state) {
    st.fired = 0;
    st.ready = false;
  }
}

// --- per-parameter masks of the shards -------------------------------------------------------------

std::vector<torch::Tensor> ShardedCore::shard_masks(
    const std::function<bool(const std::string&, c10::IntArrayRef)>& select) const {
  const Impl& m = *impl_;
  std::vector<torch::Tensor> out;
  for (const auto& unit : m.units) {
    auto full = torch::zeros({unit->padded()}, unit->shard().options().requires_grad(false));
    for (const auto& p : unit->params())
      if (select(p.name, p.param.sizes())) full.narrow(0, p.offset, p.numel).fill_(1);
    out.push_back(full.narrow(0, unit->shard_begin(), unit->shard_size()).clone());
  }
  return out;
}

// --- gradient clipping -----------------------------------------------------------------------------

double ShardedCore::clip_grad_norm(double max_norm, double norm_type) {
  Impl& m = *impl_;
  std::lock_guard<std::recursive_mutex> lock(m.mu);
  torch::NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  // Shards are disjoint (padding holds zeros), so the global norm is the reduction of the
  // shards' partial norms: sum of |g|^p, or the max for p = inf.
  double local = 0;
  for (const auto& s : m.shards) {
    const auto& g = s.grad();
    if (!g.defined()) continue;
    const double part = inf ? g.abs().max().item<double>() : g.to(torch::kDouble).abs().pow(norm_type).sum().item<double>();
    local = inf ? std::max(local, part) : local + part;
  }
  auto t = torch::tensor({local}, torch::kDouble);
  auto group = m.ctx->group();
  const int w = m.world;
  m.queue->submit([group, t, inf, w] {
    if (w == 1) return;
    std::vector<torch::Tensor> tensors{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = inf ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    group->allreduce(tensors, opts)->wait();
  }).get();
  const double total = inf ? t.item<double>() : std::pow(t.item<double>(), 1.0 / norm_type);
  // The monitor's gradient norm (the L2 one only) and its NaN policy: computed here anyway.
  if (norm_type == 2.0 && m.monitor->wants_grad_norm() && m.monitor->check_grad_norm(total, m.rank)) {
    for (auto& s : m.shards) s.mutable_grad() = torch::Tensor();  // on_nan=skip: the optimizer skips the step
    return total;
  }
  const double coef = max_norm / (total + 1e-6);  // as torch::nn::utils::clip_grad_norm_
  if (coef < 1) {
    for (auto& s : m.shards)
      if (s.grad().defined()) s.grad().mul_(coef);
  }
  return total;
}

}  // namespace cohort::detail
