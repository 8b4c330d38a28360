// A prepared data set as a torch::data stateful dataset: the global order, this rank's share of
// every global batch, and a state that restores at another world size. See cohort/sharded_dataset.h.
#include "cohort/sharded_dataset.h"

#include <torch/serialize/archive.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cohort/context.h"
#include "cohort/error.h"
#include "data/prefetcher.h"
#include "data/shards/sample_sources.h"
#include "runtime/json_fields.h"

namespace cohort {

struct ShardedDataset::Impl {
  int rank = 0;
  int world = 1;
  ShardedDatasetOptions options;
  std::unique_ptr<data::SampleSources> sources;
  std::unique_ptr<data::Prefetcher> prefetcher;  // null with prefetch_batches = 0
  // Samples read since their pages were last released; guarded by `mutex`.
  std::vector<std::pair<size_t, uint64_t>> read;
  uint64_t read_bytes = 0;
  void note_read(const std::vector<std::pair<size_t, uint64_t>>& samples, uint64_t bytes);
  // Asks the prefetcher for what follows the batch at `first`: local samples' bytes, remote shards.
  void request_ahead(int64_t epoch, int64_t first);
  mutable std::mutex mutex;
  int64_t epoch = 0;
  int64_t position = 0;  // positions of the epoch's order the whole job consumed
  int64_t steps() const { return static_cast<int64_t>(sources->epoch_samples()) / options.global_batch; }
  bool remote = false;  // a source is at an http(s) URL
};

namespace {

// Read pages of the mapped shards count in the resident set until unmapped; every this many bytes
// read, they are (they stay in the page cache). Fewer, merged calls than one a sample: a page
// released too early is read again as a minor fault, and each madvise flushes the TLB.
constexpr uint64_t kReleaseEveryBytes = 8ull << 20;

std::string without_rank_prefix(const std::string& what) {
  return what.rfind("cohort: ", 0) == 0 ? what.substr(8) : what;  // ShardSet's errors know no rank
}

}  // namespace

ShardedDataset::ShardedDataset(const std::string& dir, const std::shared_ptr<Context>& ctx, ShardedDatasetOptions options)
    : ShardedDataset(dir, ctx ? ctx->rank() : 0, ctx ? ctx->world_size() : 1, options) {
  if (!ctx) throw ConfigError(-1, "ShardedDataset needs the Context that cohort::init() returns (got a null one)");
}

ShardedDataset::ShardedDataset(const std::string& dir, int rank, int world_size, ShardedDatasetOptions options)
    : ShardedDataset(std::vector<BlendSource>{{dir, 1}}, rank, world_size, options) {}

ShardedDataset::ShardedDataset(const std::vector<BlendSource>& sources, const std::shared_ptr<Context>& ctx,
                               ShardedDatasetOptions options)
    : ShardedDataset(sources, ctx ? ctx->rank() : 0, ctx ? ctx->world_size() : 1, options) {
  if (!ctx) throw ConfigError(-1, "ShardedDataset needs the Context that cohort::init() returns (got a null one)");
}

ShardedDataset::ShardedDataset(const std::vector<BlendSource>& sources, int rank, int world_size,
                               ShardedDatasetOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& m = *impl_;
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError(rank, "ShardedDataset: rank " + std::to_string(rank) + " of a world of " + std::to_string(world_size));
  }
  m.rank = rank;
  m.world = world_size;
  m.options = options;
  if (options.global_batch <= 0 || options.global_batch % world_size != 0) {
    throw ConfigError(rank, "ShardedDataset: the global batch (" + std::to_string(options.global_batch) +
                                ") must be a positive multiple of the world size (" + std::to_string(world_size) + ")");
  }
  std::vector<data::SourceSpec> specs;
  for (const auto& s : sources) specs.push_back({s.dir, s.weight});
  try {
    const uint64_t window = options.seq_len > 0 ? static_cast<uint64_t>(options.seq_len) + 1 : 2;
    data::RemoteOptions remote;
    remote.cache_dir = options.cache_dir;
    remote.cache_bytes = options.cache_bytes;
    remote.http = {std::max(1, options.http_tries), std::max(0.0, options.http_backoff_s), std::max(0.1, options.http_timeout_s)};
    remote.rank = rank;
    m.sources = std::make_unique<data::SampleSources>(
        specs, window, options.seed, data::OrderOptions{options.block, options.window_blocks, options.shuffle},
        options.verify_checksums, remote);
  } catch (const ConfigError& e) {
    throw ConfigError(rank, without_rank_prefix(e.what()));
  } catch (const Error&) {  // a server that does not answer: already names the rank
    throw;
  } catch (const std::exception& e) {  // the order's limits
    throw ConfigError(rank, std::string("ShardedDataset: ") + e.what());
  }
  const std::string& names = m.sources->names();
  if (m.sources->tokens() && options.seq_len <= 0) {
    throw ConfigError(rank, names + " holds tokens: set ShardedDatasetOptions::seq_len (tokens per sample, minus one)");
  }
  if (options.prefetch_batches < 0) throw ConfigError(rank, "ShardedDataset: a negative prefetch_batches");
  for (size_t d = 0; d < m.sources->sources(); ++d) m.remote = m.remote || m.sources->source(d).remote();
  if (options.prefetch_batches > 0) m.prefetcher = std::make_unique<data::Prefetcher>();
  if (m.sources->epoch_samples() < static_cast<uint64_t>(options.global_batch)) {
    throw ConfigError(rank, names + ": " + std::to_string(m.sources->epoch_samples()) +
                                " samples, fewer than one global batch (" + std::to_string(options.global_batch) + ")" +
                                (m.sources->tokens() ? " at seq_len " + std::to_string(options.seq_len) : ""));
  }
}

torch::optional<torch::data::Example<>> ShardedDataset::get_batch(size_t batch_size) {
  try {
    return read_batch(batch_size);
  } catch (const ConfigError& e) {  // a shard changed under the job: the shard's name, and this rank
    if (e.rank() >= 0) throw;
    throw ConfigError(impl_->rank, without_rank_prefix(e.what()));
  }
}

torch::optional<torch::data::Example<>> ShardedDataset::read_batch(size_t batch_size) {
  Impl& m = *impl_;
  const int64_t local = local_batch();
  if (static_cast<int64_t>(batch_size) != local) {
    throw ConfigError(m.rank, "ShardedDataset: the loader asks for " + std::to_string(batch_size) +
                                  " samples; each rank reads global_batch / world size = " + std::to_string(local) +
                                  " (DataLoaderOptions(dataset.local_batch()))");
  }
  int64_t epoch, first;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.position + m.options.global_batch > m.steps() * m.options.global_batch) return torch::nullopt;
    epoch = m.epoch;
    first = m.position;
    m.position += m.options.global_batch;
  }
  std::vector<std::pair<size_t, uint64_t>> done;  // what this batch read, for note_read()
  auto at = [&](int64_t j) { return m.sources->at(static_cast<uint64_t>(epoch), static_cast<uint64_t>(first + j * m.world + m.rank)); };
  if (m.prefetcher) m.request_ahead(epoch, first);
  if (m.sources->tokens()) {
    const int64_t window = m.options.seq_len + 1;
    torch::Tensor t = torch::empty({local, window}, torch::kInt64);
    int64_t* out = t.data_ptr<int64_t>();
    for (int64_t j = 0; j < local; ++j) {
      const data::SampleRef ref = at(j);
      m.sources->source(ref.source).read_tokens(ref.sample, out + j * window);
      done.emplace_back(ref.source, ref.sample);
    }
    m.note_read(done, static_cast<uint64_t>(t.numel()) * m.sources->source(0).manifest().item_bytes);
    return torch::data::Example<>(t.narrow(1, 0, window - 1).contiguous(), t.narrow(1, 1, window - 1).contiguous());
  }
  const int64_t bytes = static_cast<int64_t>(m.sources->source(0).manifest().item_bytes);
  torch::Tensor t = torch::empty({local, bytes}, torch::kUInt8);
  uint8_t* out = t.data_ptr<uint8_t>();
  for (int64_t j = 0; j < local; ++j) {
    const data::SampleRef ref = at(j);
    m.sources->source(ref.source).read_record(ref.sample, out + j * bytes);
    done.emplace_back(ref.source, ref.sample);
  }
  m.note_read(done, static_cast<uint64_t>(t.numel()));
  return torch::data::Example<>(t, torch::Tensor());
}

void ShardedDataset::Impl::request_ahead(int64_t epoch, int64_t first) {
  // Local shards: this rank's next batches of the epoch, read into the page cache while the step
  // computes. Remote shards: the shards those batches and the rest of the shuffle's window (sampled
  // at 64 positions) lie in, fetched into the cache in the order they are needed.
  const int64_t G = options.global_batch, local = G / world, end = steps() * G;
  auto at = [&](int64_t position) { return sources->at(static_cast<uint64_t>(epoch), static_cast<uint64_t>(position)); };
  std::vector<data::Prefetcher::Range> ahead;
  std::vector<std::vector<size_t>> shards(sources->sources());  // per source, in the order needed
  auto need = [&](const data::SampleRef& ref) {
    const data::ShardSet& set = sources->source(ref.source);
    if (!set.remote()) {
      const auto span = set.sample_bytes(ref.sample);
      ahead.emplace_back(span.first, static_cast<size_t>(span.second));
      return;
    }
    const size_t s = set.shard_of(ref.sample);
    auto& list = shards[ref.source];
    if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
  };
  for (int64_t b = 1; b <= options.prefetch_batches && first + b * G < end; ++b) {
    for (int64_t j = 0; j < local; ++j) need(at(first + b * G + j * world + rank));
  }
  if (remote) {
    const int64_t from = first + G, span = static_cast<int64_t>(std::min<uint64_t>(options.block * options.window_blocks, 1ull << 40));
    const int64_t to = std::min(end, from + span);
    for (int64_t k = 0; k < 64 && from < to; ++k) {
      const data::SampleRef ref = at(from + (to - from) * k / 64);
      if (sources->source(ref.source).remote()) need(ref);
    }
  }
  std::vector<data::Prefetcher::Task> tasks;
  for (size_t d = 0; d < shards.size(); ++d) {
    if (shards[d].empty()) continue;
    const auto keep = std::make_shared<const std::vector<size_t>>(shards[d]);
    const data::ShardSet* set = &sources->source(d);
    for (size_t s : shards[d]) tasks.push_back([set, s, keep] { set->prefetch_shard(s, *keep); });
  }
  prefetcher->request(std::move(ahead), std::move(tasks));
}

void ShardedDataset::Impl::note_read(const std::vector<std::pair<size_t, uint64_t>>& samples, uint64_t bytes) {
  std::vector<std::pair<size_t, uint64_t>> due;
  {
    std::lock_guard<std::mutex> lock(mutex);
    read.insert(read.end(), samples.begin(), samples.end());
    read_bytes += bytes;
    if (read_bytes < kReleaseEveryBytes) return;
    due.swap(read);
    read_bytes = 0;
  }
  std::vector<std::vector<uint64_t>> by_source(sources->sources());
  for (const auto& [source, sample] : due) by_source[source].push_back(sample);
  for (size_t d = 0; d < by_source.size(); ++d) {
    if (!by_source[d].empty()) sources->source(d).release_samples(std::move(by_source[d]));
  }
}

torch::optional<size_t> ShardedDataset::size() const { return static_cast<size_t>(impl_->steps() * local_batch()); }

void ShardedDataset::reset() {
  // Each pass starts by checking that the shards are still the files the job opened (a stat each):
  // one deleted stays readable through its mapping, but no restart could open it again.
  for (size_t d = 0; d < impl_->sources->sources(); ++d) {
    try {
      impl_->sources->source(d).check_files();
    } catch (const ConfigError& e) {
      throw ConfigError(impl_->rank, without_rank_prefix(e.what()));
    }
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->position >= impl_->steps() * impl_->options.global_batch) {
    ++impl_->epoch;
    impl_->position = 0;
  }
}

uint64_t ShardedDataset::vocab_size() const {
  const auto& m = impl_->sources->source(0).manifest();
  return m.tokens() ? m.vocab_size : 0;
}

uint64_t ShardedDataset::record_bytes() const {
  const auto& m = impl_->sources->source(0).manifest();
  return m.tokens() ? 0 : m.item_bytes;
}

std::string ShardedDataset::tokenizer_model() const {
  const data::ShardSet& set = impl_->sources->source(0);
  const auto& t = set.manifest().tokenizer;
  return set.manifest().tokens() && t.kind == "sentencepiece" && !t.file.empty() ? set.dir() + "/" + t.file : "";
}

int64_t ShardedDataset::local_batch() const { return impl_->options.global_batch / impl_->world; }
int64_t ShardedDataset::steps_per_epoch() const { return impl_->steps(); }
uint64_t ShardedDataset::samples() const { return impl_->sources->epoch_samples(); }

int64_t ShardedDataset::epoch() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->epoch;
}

uint64_t ShardedDataset::sample_at(int64_t epoch, uint64_t position) const {
  return impl_->sources->at(static_cast<uint64_t>(epoch), position).sample;
}

size_t ShardedDataset::source_at(int64_t epoch, uint64_t position) const {
  return impl_->sources->at(static_cast<uint64_t>(epoch), position).source;
}

ShardedDatasetState ShardedDataset::state() const {
  const Impl& m = *impl_;
  ShardedDatasetState s;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    s.epoch = m.epoch;
    s.position = m.position;
  }
  s.seed = m.options.seed;
  s.global_batch = m.options.global_batch;
  s.world_size = m.world;
  s.seq_len = m.sources->tokens() ? m.options.seq_len : 0;
  s.samples = m.sources->epoch_samples();
  s.block = m.options.block;
  s.window_blocks = m.options.window_blocks;
  s.shuffle = m.options.shuffle;
  s.data = m.sources->fingerprint();
  s.tokenizer = m.sources->tokenizer();
  return s;
}

void ShardedDataset::load_state(const ShardedDatasetState& s) {
  Impl& m = *impl_;
  const ShardedDatasetState here = state();
  auto differs = [&](const std::string& what, const std::string& mine, const std::string& saved) {
    throw ConfigError(m.rank, "ShardedDataset: " + what + " differs from the checkpoint's: " + mine + " here, " + saved +
                                  " in the checkpoint (" + m.sources->names() + "); resume on the data the job started with");
  };
  if (s.tokenizer != here.tokenizer) differs("the tokenizer", "hash " + here.tokenizer, "hash " + s.tokenizer);
  if (s.data != here.data) {
    differs(m.sources->sources() > 1 ? "the blend (its data sets or weights)" : "the data set", "fingerprint " + here.data,
            "fingerprint " + s.data);
  }
  if (s.seq_len != here.seq_len) differs("the sequence length", std::to_string(here.seq_len), std::to_string(s.seq_len));
  if (s.samples != here.samples) differs("the sample count", std::to_string(here.samples), std::to_string(s.samples));
  if (s.seed != here.seed || s.block != here.block || s.window_blocks != here.window_blocks || s.shuffle != here.shuffle) {
    auto order = [](const ShardedDatasetState& x) {
      return "seed " + std::to_string(x.seed) + ", block " + std::to_string(x.block) + " × " + std::to_string(x.window_blocks) +
             (x.shuffle ? "" : ", unshuffled");
    };
    differs("the order", order(here), order(s));
  }
  if (s.epoch < 0 || s.position < 0 || static_cast<uint64_t>(s.position) > s.samples) {
    throw ConfigError(m.rank, "ShardedDataset: a state at epoch " + std::to_string(s.epoch) + ", position " +
                                  std::to_string(s.position) + " of " + std::to_string(s.samples) + " samples");
  }
  std::lock_guard<std::mutex> lock(m.mutex);
  m.epoch = s.epoch;
  m.position = s.position;
}

std::string ShardedDataset::state_dict() const { return state().to_json(); }
void ShardedDataset::load_state_dict(const std::string& state) { load_state(ShardedDatasetState::from_json(state)); }

void ShardedDataset::save(torch::serialize::OutputArchive& archive) const {
  const std::string json = state().to_json();
  archive.write("cohort_sharded_dataset_json",
                torch::from_blob(const_cast<char*>(json.data()), {static_cast<int64_t>(json.size())}, torch::kUInt8).clone());
}

void ShardedDataset::load(torch::serialize::InputArchive& archive) {
  torch::Tensor t;
  archive.read("cohort_sharded_dataset_json", t);
  t = t.contiguous();
  load_state_dict(std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), static_cast<size_t>(t.numel())));
}

std::string ShardedDatasetState::to_json() const {
  const nlohmann::json j = {{"epoch", epoch},   {"position", position},       {"seed", seed},
                            {"global_batch", global_batch}, {"world_size", world_size}, {"seq_len", seq_len},
                            {"samples", samples}, {"block", block},           {"window_blocks", window_blocks},
                            {"shuffle", shuffle}, {"data", data},             {"tokenizer", tokenizer}};
  return j.dump();
}

ShardedDatasetState ShardedDatasetState::from_json(const std::string& text) {
  std::string problem;
  const nlohmann::json j = detail::parse_capped_or_discarded(text, &problem);
  if (j.is_discarded() || !j.is_object()) throw ConfigError(-1, "a ShardedDataset state that is " + (problem.empty() ? "not an object" : problem));
  ShardedDatasetState s;
  try {
    const int64_t big = std::numeric_limits<int64_t>::max();
    s.epoch = detail::integer_field(j, "epoch", 0, big);
    s.position = detail::integer_field(j, "position", 0, big);
    if (!j.at("seed").is_number_unsigned()) throw std::runtime_error("has a \"seed\" that is not an unsigned integer");
    s.seed = j.at("seed").get<uint64_t>();
    s.global_batch = detail::integer_field(j, "global_batch", 1, big);
    s.world_size = static_cast<int>(detail::integer_field(j, "world_size", 1, 1 << 24));
    s.seq_len = detail::integer_field(j, "seq_len", 0, big);
    s.samples = static_cast<uint64_t>(detail::integer_field(j, "samples", 0, big));
    s.block = static_cast<uint64_t>(detail::integer_field(j, "block", 1, big));
    s.window_blocks = static_cast<uint64_t>(detail::integer_field(j, "window_blocks", 1, big));
    s.shuffle = j.at("shuffle").get<bool>();
    s.data = j.at("data").get<std::string>();
    s.tokenizer = j.at("tokenizer").get<std::string>();
  } catch (const std::exception& e) {
    throw ConfigError(-1, std::string("a ShardedDataset state that ") + e.what());
  }
  return s;
}

}  // namespace cohort
