// Which parameters form which unit of sharded data parallel, from the options; every bad
// combination is a ConfigError here, before any collective, so every rank throws alike. Internal.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/sharded_data_parallel.h"

namespace cohort::detail {

struct UnitPlan {
  struct Unit {
    std::vector<std::string> param_names;  // registration order
    std::vector<torch::Tensor> params;
    int first_child = -1, last_child = -1;  // level 3 on a Sequential: the children it spans
    bool keep_gathered = false;             // ShardedOptions::keep_gathered names one of them
  };
  std::vector<Unit> units;
  /// Level 3 on a Sequential: whether forward runs children unit by unit.
  bool per_child = false;
};

UnitPlan plan_units(torch::nn::Module& module, bool is_sequential, const ShardedOptions& options, int rank);

}  // namespace cohort::detail
