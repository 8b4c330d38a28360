// DistributedSampler: see cohort/distributed_sampler.h for the semantics.
//
// Positions: an epoch's order has N positions. A pass starts at `start` (0, or where a restored
// job was) and shares the R = N - start remaining positions out over W ranks: the pass has
// T = ceil(R/W)·W slots (floor with drop_last); rank r's i-th sample is slot i·W + r, and a slot
// past R repeats the pass's order from its beginning (padding). After each rank handed out c
// samples, the whole job has consumed min(start + c·W, N) positions.
#include "cohort/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>
#include <torch/torch.h>

#include <mutex>

#include "cohort/context.h"
#include "cohort/error.h"

namespace cohort {

struct DistributedSampler::State {
  std::mutex mu;
  size_t size;
  int rank;
  int world;
  SamplerOptions options;
  int64_t epoch = 0;
  std::vector<int64_t> order;  // the current epoch's order of sample indices
  int64_t order_epoch = -1;
  int64_t start = 0;    // position where the current pass began
  size_t cursor = 0;    // samples this rank handed out in the current pass
  bool restored = false;  // the next reset() continues from a loaded state

  size_t remaining() const { return size - static_cast<size_t>(start); }
  size_t local_size() const {
    size_t r = remaining();
    size_t slots = options.drop_last ? (r / world) * world : ((r + world - 1) / world) * world;
    return slots / world;
  }
  int64_t consumed() const {
    return std::min<int64_t>(start + static_cast<int64_t>(cursor) * world, static_cast<int64_t>(size));
  }
  void ensure_order() {
    if (order_epoch == epoch && order.size() == size) return;
    if (options.shuffle) {
      // The same generator and call as torch.utils.data.DistributedSampler, so both give the
      // same order for the same seed and epoch.
      auto gen = at::detail::createCPUGenerator(options.seed + static_cast<uint64_t>(epoch));
      auto perm = torch::randperm(static_cast<int64_t>(size), gen, torch::kLong);
      order.assign(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size);
    } else {
      order.resize(size);
      for (size_t i = 0; i < size; ++i) order[i] = static_cast<int64_t>(i);
    }
    order_epoch = epoch;
  }
};

DistributedSampler::DistributedSampler(size_t dataset_size, const std::shared_ptr<Context>& ctx, SamplerOptions options)
    : DistributedSampler(dataset_size, ctx ? ctx->rank() : 0, ctx ? ctx->world_size() : 1, options) {
  if (!ctx) throw ConfigError(-1, "DistributedSampler needs the Context that cohort::init() returns (got a null one)");
}

DistributedSampler::DistributedSampler(size_t dataset_size, int rank, int world_size, SamplerOptions options)
    : state_(std::make_shared<State>()) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError(rank, "DistributedSampler: rank " + std::to_string(rank) + " is not in a world of " +
                                std::to_string(world_size));
  }
  state_->size = dataset_size;
  state_->rank = rank;
  state_->world = world_size;
  state_->options = options;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (epoch == state_->epoch) return;  // same epoch: keep a restored position
  state_->epoch = epoch;
  state_->start = 0;
  state_->cursor = 0;
  state_->restored = false;
}

int64_t DistributedSampler::epoch() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->epoch;
}

size_t DistributedSampler::local_size() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->local_size();
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (new_size && *new_size != s.size) {
    s.size = *new_size;
    s.start = 0;
    s.cursor = 0;
    s.restored = false;
  }
  if (s.restored) {
    s.restored = false;  // start stays where the loaded state was
  } else if (s.cursor >= s.local_size()) {
    s.start = 0;  // the pass was complete: a new pass over the same epoch
  } else {
    s.start = s.consumed();  // an interrupted pass continues
  }
  s.cursor = 0;
  s.ensure_order();
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  s.ensure_order();
  const size_t local = s.local_size();
  if (s.cursor >= local) return torch::nullopt;
  const size_t n = std::min(batch_size, local - s.cursor);
  const size_t r = s.remaining();
  std::vector<size_t> out(n);
  for (size_t k = 0; k < n; ++k) {
    size_t slot = (s.cursor + k) * s.world + s.rank;
    if (slot >= r) slot = (slot - r) % r;  // padding repeats the pass from its beginning
    out[k] = static_cast<size_t>(s.order[s.start + slot]);
  }
  s.cursor += n;
  return out;
}

SamplerState DistributedSampler::state() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  const State& s = *state_;
  SamplerState out;
  out.epoch = s.epoch;
  out.consumed = s.restored ? s.start : s.consumed();
  out.dataset_size = static_cast<int64_t>(s.size);
  out.seed = s.options.seed;
  out.shuffle = s.options.shuffle;
  return out;
}

void DistributedSampler::load_state(const SamplerState& st) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State& s = *state_;
  if (st.dataset_size != static_cast<int64_t>(s.size)) {
    throw ConfigError(s.rank, "sampler state is for a dataset of " + std::to_string(st.dataset_size) +
                                  " samples, this one has " + std::to_string(s.size));
  }
  if (st.seed != s.options.seed || st.shuffle != s.options.shuffle) {
    throw ConfigError(s.rank, "sampler state was saved with seed " + std::to_string(st.seed) +
                                  (st.shuffle ? " (shuffled)" : " (not shuffled)") + ", this sampler has seed " +
                                  std::to_string(s.options.seed) + (s.options.shuffle ? " (shuffled)" : " (not shuffled)"));
  }
  if (st.consumed < 0 || st.consumed > st.dataset_size || st.epoch < 0) {
    throw ConfigError(s.rank, "sampler state is invalid (epoch " + std::to_string(st.epoch) + ", consumed " +
                                  std::to_string(st.consumed) + ")");
  }
  s.epoch = st.epoch;
  s.start = st.consumed;
  s.cursor = 0;
  s.restored = true;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const std::string json = state().to_json();
  archive.write("cohort_sampler_json",
                torch::from_blob(const_cast<char*>(json.data()), {static_cast<int64_t>(json.size())}, torch::kUInt8).clone());
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  torch::Tensor t;
  archive.read("cohort_sampler_json", t);
  t = t.contiguous();
  load_state(SamplerState::from_json(std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()),
                                                 static_cast<size_t>(t.numel()))));
}

}  // namespace cohort
