// cohort/sampler_state.h — what a checkpoint keeps of a DistributedSampler (distributed_sampler.h),
// and its JSON. Torch-free, so that the parser of a state read from a checkpoint on disk can be
// fuzzed on its own (fuzz/fuzz_sampler_state.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace cohort {

/// What a checkpoint keeps of a sampler. `consumed` counts positions of the epoch's order.
struct SamplerState {
  int64_t epoch = 0;         ///< the epoch the job is in
  int64_t consumed = 0;      ///< positions of the epoch's order the whole job consumed (a prefix)
  int64_t dataset_size = 0;  ///< samples in the dataset; load_state() checks it
  uint64_t seed = 0;         ///< the order's seed; load_state() checks it
  bool shuffle = true;       ///< whether the order is shuffled; load_state() checks it
  /// The state as a JSON object (how checkpoints store it).
  std::string to_json() const;
  /// Parses to_json()'s text; throws cohort::ConfigError for anything else.
  static SamplerState from_json(const std::string& text);  // throws cohort::ConfigError
};

}  // namespace cohort
