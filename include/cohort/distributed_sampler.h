// cohort/distributed_sampler.h — each rank's share of a dataset, per epoch, resumable.
//
// Semantics of torch.utils.data.DistributedSampler: the epoch's order is a permutation seeded
// with seed + epoch (or 0..N-1 without shuffle); rank r takes positions r, r+W, r+2W, ...; every
// rank gets the same number of samples, by repeating samples from the start of the order
// (padding) or, with drop_last, by dropping the tail.
//
// Beyond it: a small state (epoch, samples the whole job consumed this epoch) that restores on a
// different world size. The consumed samples are always a prefix of the epoch's order (rank r's
// k-th local sample is position k·W + r), so the rest of the epoch is the order from `consumed`
// on, shared out again over the new world size: nothing lost, nothing repeated.
//
// The sampler is a handle: copies share one state. make_data_loader takes its sampler by value,
// and `sampler.set_epoch(e)` on your copy still reaches the loader's.
//
// Counting: `consumed` advances when the loader asks for a batch. With DataLoaderOptions
// workers == 0 (the default) that is exactly the batches your loop has received; with workers > 0
// the loader asks up to max_jobs batches ahead, so subtract those when you save.
#pragma once

#include <torch/data/samplers/base.h>

#include "cohort/sampler_state.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cohort {

class Context;

/// How a DistributedSampler orders an epoch and evens out the ranks' shares.
struct SamplerOptions {
  bool shuffle = true;     ///< permute each epoch's order, seeded with seed + epoch (else 0..N-1)
  uint64_t seed = 0;       ///< seeds the permutations; use the same on every rank
  bool drop_last = false;  ///< even out the shares by dropping the tail, not by repeating samples
};

/// Each rank's share of a dataset, per epoch, resumable on another world size: a libtorch Sampler
/// with torch.utils.data.DistributedSampler's semantics. A handle: copies share one state.
class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  /// This rank's share of a dataset of `dataset_size` samples, for the job `ctx` (the shared
  /// pointer cohort::init() returns, as DistributedDataParallel and the Checkpointer take it).
  DistributedSampler(size_t dataset_size, const std::shared_ptr<Context>& ctx, SamplerOptions options = {});
  /// Without a Context, for tests and tools: explicit rank and world size.
  DistributedSampler(size_t dataset_size, int rank, int world_size, SamplerOptions options = {});

  /// Starts epoch `epoch` from its beginning, unless it is the epoch a restored state is in:
  /// then the epoch continues where the job was.
  void set_epoch(int64_t epoch);
  /// The current epoch (set_epoch()'s, or a restored state's).
  int64_t epoch() const;

  /// Samples this rank yields in a full pass of the current epoch from `consumed` on.
  size_t local_size() const;

  /// What a checkpoint keeps: the epoch and how much of its order the whole job consumed.
  SamplerState state() const;
  /// Continues from `state`, which may come from a different world size. Throws ConfigError if
  /// it describes another dataset size or order (seed / shuffle).
  void load_state(const SamplerState& state);

  // torch::data::samplers::Sampler
  /// torch's Sampler interface: starts a pass over the epoch. A restored or interrupted pass
  /// continues where the job was, a finished one starts the epoch over; another `new_size` starts
  /// the epoch over with that dataset size.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  /// torch's Sampler interface: the next batch of this rank's indices (at most `batch_size`);
  /// nullopt once this rank's share of the pass is handed out.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// torch's Sampler interface: writes state() (as JSON) into `archive`.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// torch's Sampler interface: continues from the state save() wrote, as load_state() does.
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace cohort
