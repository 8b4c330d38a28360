#include "checkpoint/sharded/reshard.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "cohort/error.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {

std::string FlatLayout::to_json() const {
  nlohmann::ordered_json j{{"world_size", world_size}, {"optimizer_fields", optimizer_fields}};
  auto& us = j["units"] = nlohmann::ordered_json::array();
  for (const auto& u : units) {
    nlohmann::ordered_json ps = nlohmann::ordered_json::array();
    for (const auto& p : u.params) ps.push_back({{"name", p.name}, {"offset", p.offset}, {"numel", p.numel}});
    us.push_back({{"numel", u.numel}, {"shard", u.shard}, {"params", ps}});
  }
  return j.dump();
}

FlatLayout FlatLayout::parse(const std::string& text, int rank) {
  try {
    const auto j = detail::parse_capped(text);
    if (j.contains("mesh"))
      throw CheckpointError(rank, "the checkpoint was saved by a model on a device mesh, not by ShardedDataParallel: "
                                  "restore it into a model on a mesh (cohort::MeshCheckpointable)");
    if (j.contains("local_sgd"))
      throw CheckpointError(rank, "the checkpoint was saved by a LocalSGD model (each rank's own parameters), not by "
                                  "ShardedDataParallel: restore it into a LocalSGD model");
    FlatLayout l;
    l.world_size = j.at("world_size").get<int>();
    l.optimizer_fields = j.at("optimizer_fields").get<std::vector<std::string>>();
    for (const auto& u : j.at("units")) {
      Unit unit;
      unit.numel = u.at("numel").get<int64_t>();
      unit.shard = u.at("shard").get<int64_t>();
      for (const auto& p : u.at("params"))
        unit.params.push_back({p.at("name").get<std::string>(), p.at("offset").get<int64_t>(), p.at("numel").get<int64_t>()});
      if (unit.shard * l.world_size < unit.numel) throw std::runtime_error("a unit's shards do not cover it");
      l.units.push_back(std::move(unit));
    }
    return l;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(rank, std::string("the checkpoint's sharding layout is not valid: ") + e.what());
  }
}

void reshard_unit(const FlatLayout& saved, const FlatLayout& now, size_t unit, int rank,
                  const std::function<at::Tensor(int, size_t)>& saved_slice, at::Tensor out) {
  struct Where {
    size_t unit;
    int64_t offset, numel;
  };
  std::map<std::string, Where> where;
  for (size_t u = 0; u < saved.units.size(); ++u)
    for (const auto& p : saved.units[u].params) where[p.name] = {u, p.offset, p.numel};

  const auto& target = now.units[unit];
  const int64_t begin = target.shard * rank, end = std::min(begin + target.shard, target.numel);
  out.zero_();
  for (const auto& p : target.params) {
    const auto it = where.find(p.name);
    if (it == where.end())
      throw CheckpointError(rank, "the sharded checkpoint has no parameter \"" + p.name + "\": it is of another model");
    if (it->second.numel != p.numel)
      throw CheckpointError(rank, "parameter \"" + p.name + "\" has " + std::to_string(it->second.numel) +
                                      " elements in the checkpoint but " + std::to_string(p.numel) + " in the model");
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    // [lo, hi) of the new flat buffer is [from, from + hi - lo) of the saved unit's flat buffer,
    // which may span several saved ranks' slices.
    const int64_t per_rank = saved.units[it->second.unit].shard;
    int64_t from = it->second.offset + (lo - p.offset), done = 0, left = hi - lo;
    while (left > 0) {
      const int q = static_cast<int>(from / per_rank);
      const int64_t within = from % per_rank, n = std::min(left, per_rank - within);
      const at::Tensor src = saved_slice(q, it->second.unit);
      if (!src.defined() || src.numel() != per_rank)
        throw CheckpointError(rank, "the sharded checkpoint's slice of rank " + std::to_string(q) + " for unit " +
                                        std::to_string(it->second.unit) + " is missing or has the wrong size");
      out.narrow(0, lo - begin + done, n).copy_(src.narrow(0, within, n));
      from += n;
      done += n;
      left -= n;
    }
  }
}

}  // namespace cohort::ckpt
