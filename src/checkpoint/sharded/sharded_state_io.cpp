// ShardedCore's checkpoint side: this rank's shard (parameters and optimizer state per unit) for
// the Checkpointer, resharding on restore (src/checkpoint/sharded/reshard.h), and the whole state gathered
// under the names an unsharded checkpoint uses.
#include <map>
#include <set>

#include "checkpoint/sharded/reshard.h"
#include "checkpoint/format/training_state.h"
#include "cohort/error.h"
#include "parallel/sharded/sharded_core_impl.h"

namespace cohort::detail {
namespace {

std::string unit_prefix(size_t u) { return "unit" + std::to_string(u); }

// Field names of one shard's optimizer state ("exp_avg", "step", ...).
std::map<std::string, torch::Tensor> fields_of(const torch::optim::Optimizer& optimizer, const torch::Tensor& shard,
                                               int rank) {
  ckpt::NamedTensors named;
  ckpt::param_state_tensors(optimizer, shard, "x", named, rank);
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : named) out[name.substr(2)] = t;
  return out;
}

}  // namespace

std::string ShardedCore::Impl::layout_json(const torch::optim::Optimizer* optimizer) const {
  ckpt::FlatLayout l;
  l.world_size = world;
  for (const auto& unit : units) {
    ckpt::FlatLayout::Unit u{unit->numel(), unit->shard_size(), {}};
    for (const auto& p : unit->params()) u.params.push_back({"module." + p.name, p.offset, p.numel});
    l.units.push_back(std::move(u));
  }
  if (optimizer && !shards.empty())
    for (const auto& [field, t] : fields_of(*optimizer, shards.front(), rank))
      if (field != "step") l.optimizer_fields.push_back(field);
  return l.to_json();
}

ShardState ShardedCore::Impl::shard_state(const torch::optim::Optimizer* optimizer) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  ShardState s;
  for (size_t u = 0; u < units.size(); ++u) {
    s.tensors.emplace_back(unit_prefix(u) + "/param", shards[u].detach());
    if (optimizer) ckpt::param_state_tensors(*optimizer, shards[u], unit_prefix(u), s.tensors, rank);
  }
  s.layout_json = layout_json(optimizer);
  if (optimizer) s.optimizer_json = ckpt::optimizer_description(*optimizer, rank);
  return s;
}

NamedTensorList ShardedCore::Impl::replicated_tensors() { return replicated; }

void ShardedCore::Impl::load_shard_state(const ShardSource& source, torch::optim::Optimizer* optimizer) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  torch::NoGradGuard no_grad;
  const auto saved = ckpt::FlatLayout::parse(source.layout_json(), rank);
  const auto now = ckpt::FlatLayout::parse(layout_json(nullptr), rank);
  auto slice = [&](const std::string& field) {
    return [&source, field](int q, size_t u) { return source.tensor(q, unit_prefix(u) + "/" + field); };
  };
  if (optimizer && source.optimizer_json().empty())
    throw CheckpointError(rank, "the checkpoint holds no optimizer state, but an optimizer was given");
  for (size_t u = 0; u < units.size(); ++u) {
    auto values = torch::empty({units[u]->shard_size()}, shards[u].options().requires_grad(false));
    ckpt::reshard_unit(saved, now, u, rank, slice("param"), values);
    shards[u].detach().copy_(values);
    units[u]->stale = true;  // the next forward gathers it
    if (!optimizer) continue;
    std::map<std::string, torch::Tensor> fields;
    for (const auto& field : saved.optimizer_fields) {
      auto t = torch::empty({units[u]->shard_size()}, values.options());
      ckpt::reshard_unit(saved, now, u, rank, slice(field), t);
      fields[field] = t;
    }
    // Every unit steps together, so every saved slice holds the same step count.
    if (!fields.empty()) {
      const auto step = source.tensor(0, unit_prefix(0) + "/step");
      if (step.defined()) fields["step"] = step.clone();
    }
    ckpt::set_param_state(*optimizer, shards[u], fields, rank);
  }
  if (optimizer) ckpt::apply_optimizer_description(*optimizer, source.optimizer_json(), rank);
  needs_restore = false;  // after a rejoin: the shards are whole again (sharded_core_impl.h)
}

FullState ShardedCore::Impl::full_state(const torch::optim::Optimizer* optimizer) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  torch::NoGradGuard no_grad;
  FullState out;
  // Gathers into fresh buffers (not the units'), one field of one unit at a time.
  auto gather = [&](const torch::Tensor& shard, const FlatUnit& unit) {
    auto full = torch::empty({unit.padded()}, shard.options().requires_grad(false));
    ShardCollectives* c = coll.get();
    auto part = shard.detach();
    queue->submit([c, part, full] { c->allgather(part, full); }).get();
    return full;
  };
  std::vector<std::map<std::string, torch::Tensor>> fields(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const FlatUnit& unit = *units[u];
    const auto full = gather(shards[u], unit);
    for (const auto& p : unit.params())
      out.model.emplace_back("module." + p.name, full.narrow(0, p.offset, p.numel).view(p.param.sizes()).clone());
    if (optimizer) fields[u] = fields_of(*optimizer, shards[u], rank);
  }
  for (const auto& [name, t] : replicated) out.model.emplace_back(name, t.detach().clone());
  if (!optimizer) return out;
  for (size_t u = 0; u < units.size(); ++u) {
    const FlatUnit& unit = *units[u];
    std::map<std::string, torch::Tensor> full_fields;
    for (const auto& [field, t] : fields[u]) full_fields[field] = field == "step" ? t : gather(t, unit);
    for (const auto& p : unit.params())
      for (const auto& [field, t] : full_fields)
        out.optimizer.emplace_back("module." + p.name + "/" + field,
                                   field == "step" ? t.clone()
                                                   : t.narrow(0, p.offset, p.numel).view(p.param.sizes()).clone());
  }
  return out;
}

}  // namespace cohort::detail
