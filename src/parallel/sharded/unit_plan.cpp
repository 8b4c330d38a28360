#include "unit_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "cohort/error.h"
#include "runtime/check.h"

namespace cohort::detail {
namespace {

std::string joined(const std::vector<std::string>& names, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += ", ...";
  return out;
}

[[noreturn]] void fail(int rank, const std::string& what) {
  throw ConfigError(rank, "ShardedDataParallel: " + what);
}

}  // namespace

namespace {

UnitPlan plan_units_without_keep(torch::nn::Module& module, bool is_sequential, const ShardedOptions& options, int rank);

}  // namespace

UnitPlan plan_units(torch::nn::Module& module, bool is_sequential, const ShardedOptions& options, int rank) {
  UnitPlan plan = plan_units_without_keep(module, is_sequential, options, rank);
  if (options.keep_gathered.empty()) return plan;
  if (!plan.per_child)
    fail(rank, "keep_gathered is for level 3 on a torch::nn::Sequential (at other levels, and for a module that is "
               "one unit, everything a forward uses is gathered anyway)");
  std::vector<std::string> children;
  for (const auto& c : module.named_children()) children.push_back(c.key());
  for (const auto& name : options.keep_gathered) {
    const auto at = std::find(children.begin(), children.end(), name);
    if (at == children.end())
      fail(rank, "keep_gathered names '" + name + "', which is not a child of the Sequential (" + joined(children) + ")");
    const int c = static_cast<int>(at - children.begin());
    bool found = false;
    for (auto& u : plan.units)
      if (u.first_child <= c && c <= u.last_child) u.keep_gathered = found = true;
    if (!found) fail(rank, "keep_gathered names '" + name + "', which has no trainable parameters");
  }
  return plan;
}

namespace {

UnitPlan plan_units_without_keep(torch::nn::Module& module, bool is_sequential, const ShardedOptions& options, int rank) {
  const int level = static_cast<int>(options.level);
  if (level < 1 || level > 3) fail(rank, "level must be optimizer_state (1), gradients (2) or parameters (3), not " + std::to_string(level));
  if (!(options.unit_cap_mb > 0 && options.unit_cap_mb <= (1 << 20))) fail(rank, "unit_cap_mb must be positive MiB up to 1 TiB");

  // Trainable parameters in registration order; frozen ones stay replicated and are not sharded.
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad()) continue;
    names.push_back(p.key());
    params.push_back(p.value());
  }
  if (params.empty()) fail(rank, "the module has no trainable parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].device() != params[0].device() || params[i].scalar_type() != params[0].scalar_type())
      fail(rank, "all trainable parameters must share one device and dtype; '" + names[i] + "' is " +
                     std::string(c10::toString(params[i].scalar_type())) + " on " + params[i].device().str() +
                     ", '" + names[0] + "' " + c10::toString(params[0].scalar_type()) + " on " +
                     params[0].device().str());
    if (params[i].is_sparse()) fail(rank, "sparse parameter '" + names[i] + "' is not supported");
  }
  const bool level3 = options.level == ShardingLevel::parameters;
  UnitPlan plan;

  // Children of a Sequential, for per-child units at level 3.
  std::vector<std::string> children;
  for (const auto& c : module.named_children()) children.push_back(c.key());
  auto child_of = [&](const std::string& param) { return param.substr(0, param.find('.')); };
  auto child_index = [&](const std::string& name) {
    for (size_t i = 0; i < children.size(); ++i)
      if (children[i] == name) return static_cast<int>(i);
    return -1;
  };

  if (!options.units.empty()) {
    if (level3 && !is_sequential)
      fail(rank, "units at level 3 need the module to be a torch::nn::Sequential (libtorch has no forward hooks, "
                 "so the wrapper must call each unit itself); wrap a Sequential, or leave units empty for one unit");
    std::vector<std::string> submodules;
    for (const auto& m : module.named_modules("", /*include_self=*/false)) submodules.push_back(m.key());
    std::map<std::string, int> owner;  // parameter -> unit
    for (size_t u = 0; u < options.units.size(); ++u) {
      const auto& entry = options.units[u];
      if (entry.empty()) fail(rank, "unit " + std::to_string(u) + " names no submodule");
      UnitPlan::Unit unit;
      for (const auto& sub : entry) {
        if (std::find(submodules.begin(), submodules.end(), sub) == submodules.end())
          fail(rank, "unit " + std::to_string(u) + " names '" + sub + "', which is not a submodule of the model (" +
                         joined(level3 ? children : submodules) + ")");
        if (level3) {
          const int c = child_index(sub);
          if (c < 0) fail(rank, "unit " + std::to_string(u) + " names '" + sub + "', which is not a child of the Sequential (" + joined(children) + ")");
          if (unit.last_child >= 0 && c != unit.last_child + 1)
            fail(rank, "unit " + std::to_string(u) + " must name consecutive children of the Sequential in order; '" + sub + "' does not follow '" + children[unit.last_child] + "'");
          if (unit.first_child < 0) unit.first_child = c;
          unit.last_child = c;
        }
      }
      for (size_t i = 0; i < names.size(); ++i) {
        bool inside = false;
        for (const auto& sub : entry) inside |= names[i].rfind(sub + ".", 0) == 0;
        if (!inside) continue;
        auto [it, fresh] = owner.emplace(names[i], static_cast<int>(u));
        if (!fresh) fail(rank, "parameter '" + names[i] + "' is in unit " + std::to_string(it->second) + " and unit " + std::to_string(u));
        unit.param_names.push_back(names[i]);
        unit.params.push_back(params[i]);
      }
      if (unit.params.empty()) fail(rank, "unit " + std::to_string(u) + " (" + joined(entry) + ") has no trainable parameters");
      plan.units.push_back(std::move(unit));
    }
    for (const auto& n : names)
      if (!owner.count(n)) fail(rank, "parameter '" + n + "' is in no unit; add its submodule to a unit");
    if (level3) {
      for (size_t u = 1; u < plan.units.size(); ++u)
        if (plan.units[u].first_child <= plan.units[u - 1].last_child)
          fail(rank, "units must follow the Sequential's order: unit " + std::to_string(u) + " starts before unit " + std::to_string(u - 1) + " ends");
    } else {
      // Reductions run in reverse unit order: order units by their first parameter.
      std::map<std::string, size_t> position;
      for (size_t i = 0; i < names.size(); ++i) position[names[i]] = i;
      std::sort(plan.units.begin(), plan.units.end(), [&](const auto& a, const auto& b) {
        return position[a.param_names.front()] < position[b.param_names.front()];
      });
    }
    plan.per_child = level3;
    return plan;
  }

  if (level3 && is_sequential) {
    // One unit per child that has trainable parameters.
    for (size_t i = 0; i < names.size(); ++i) {
      const int c = child_index(child_of(names[i]));
      COHORT_CHECK(c >= 0, "parameter " << names[i] << " of no child");
      if (plan.units.empty() || plan.units.back().last_child != c) plan.units.push_back({{}, {}, c, c});
      plan.units.back().param_names.push_back(names[i]);
      plan.units.back().params.push_back(params[i]);
    }
    plan.per_child = true;
    return plan;
  }
  if (level3) {  // any other module: one unit
    plan.units.push_back({names, params, -1, -1});
    return plan;
  }
  // Levels 1, 2: consecutive parameters up to unit_cap_mb.
  const double cap = options.unit_cap_mb * 1024 * 1024;
  double bytes = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const double add = static_cast<double>(params[i].numel() * params[i].element_size());
    if (plan.units.empty() || (bytes > 0 && bytes + add > cap)) {
      plan.units.push_back({});
      bytes = 0;
    }
    plan.units.back().param_names.push_back(names[i]);
    plan.units.back().params.push_back(params[i]);
    bytes += add;
  }
  return plan;
}

}  // namespace
}  // namespace cohort::detail
