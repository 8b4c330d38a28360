// Resharding: cutting one rank's slice of a unit's flat buffer out of the slices another world
// size (or another choice of units) saved — by parameter name, so neither W nor the units have to
// match, only the parameters. Internal; the layout is described in include/cohort/sharded_state.h.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cohort::ckpt {

struct FlatLayout {
  struct Param {
    std::string name;
    int64_t offset = 0, numel = 0;
  };
  struct Unit {
    int64_t numel = 0, shard = 0;  // elements of parameters; elements per rank (padded)
    std::vector<Param> params;
  };
  int world_size = 1;
  std::vector<Unit> units;
  std::vector<std::string> optimizer_fields;  // per-element state saved for every unit ("exp_avg", ...)

  std::string to_json() const;
  /// Throws CheckpointError naming what is wrong.
  static FlatLayout parse(const std::string& text, int rank);
};

/// Fills `out` — rank `rank`'s slice (now.units[unit].shard elements) of unit `unit` under `now` —
/// from the saved slices: `saved_slice(q, u)` is saved rank q's 1-D tensor of saved unit u.
/// Padding becomes zeros. Throws CheckpointError when a parameter is missing or differs in size.
void reshard_unit(const FlatLayout& saved, const FlatLayout& now, size_t unit, int rank,
                  const std::function<at::Tensor(int, size_t)>& saved_slice, at::Tensor out);

}  // namespace cohort::ckpt
