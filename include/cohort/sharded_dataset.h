// cohort/sharded_dataset.h — a data set prepared by `cohort data prepare` (docs/data.md), read as a
// torch::data stateful dataset: memory-mapped shards (never read whole into memory), one global
// order per epoch that is a pure function of (seed, epoch, position), each rank reading its part.
//
// Every step the job consumes one global batch of `global_batch` samples: positions
// p, p+1, ..., p+G-1 of the epoch's order. Rank r of W takes positions p + j·W + r (j < G/W), so
// the global batches — which samples, not which rank reads them — are the same for every world
// size that divides G. The state (epoch, position, seed, fingerprints) is a few hundred bytes of
// JSON; restoring it is a seek, not a replay, and works at another world size.
//
// The data set's location may be an http(s) URL: shards are then fetched into a local cache folder
// (options.cache_dir, bounded by options.cache_bytes) ahead of their use.
//
// Use it with torch's loader for stateful datasets, batch size G / W, and workers = 0:
//   cohort::ShardedDatasetOptions options;
//   options.seq_len = 256;
//   options.global_batch = 64;
//   cohort::ShardedDataset data("prepared/", ctx, options);
//   auto loader = torch::data::make_data_loader(data, torch::data::DataLoaderOptions(data.local_batch()));
// `data` is a handle: copies share one state, so the copy you keep can go into checkpoints
// (Checkpointer's UserStates: {{"data", &data}}) while the loader reads through another.
#pragma once

#include <torch/data/datasets/stateful.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cohort/checkpointer.h"

namespace cohort {

class Context;

/// How a ShardedDataset cuts and orders its samples.
struct ShardedDatasetOptions {
  int64_t seq_len = 0;       ///< token data sets: a sample is seq_len + 1 tokens (ignored for records)
  int64_t global_batch = 0;  ///< samples per step across the whole job; the world size must divide it
  uint64_t seed = 0;         ///< seeds every epoch's order; the same on every rank
  uint64_t block = 4096;     ///< consecutive samples that stay together in the shuffle (sequential reads)
  uint64_t window_blocks = 8;  ///< blocks whose samples are mixed with each other
  bool shuffle = true;       ///< false: samples in data set order every epoch
  bool verify_checksums = false;  ///< hash every shard at open (slow on large data: `cohort data verify`)
  int prefetch_batches = 2;  ///< this rank's next batches read ahead into memory on a background thread (0: none)
  /// A data set at an http(s) URL (its manifest at URL/manifest.json): the folder its shards are
  /// cached in (required for a URL; the ranks of one machine may share it, docs/data.md).
  std::string cache_dir;
  uint64_t cache_bytes = 0;     ///< the cache folder's limit in bytes (0: none); below one shard plus the indexes it is refused
  int http_tries = 5;           ///< attempts per HTTP request before the error (a request that made progress counts again from 1)
  double http_backoff_s = 0.5;  ///< the wait after the first failed attempt; it doubles after each next one (0.5 + 1 + 2 + 4 s)
  double http_timeout_s = 10;   ///< the connect timeout, and how long a transfer may stall (under 1 KiB/s) before the attempt fails
};

/// One prepared data set of a blend, and its weight: a blend of {"prose", 7} and {"code", 3} draws
/// 70 % of its samples from prose, exact to one sample over any stretch of positions.
struct BlendSource {
  std::string dir;      ///< a directory `cohort data prepare` wrote
  uint64_t weight = 1;  ///< its share, relative to the others' (positive; all together at most 2^32)
};

/// What a checkpoint keeps of a ShardedDataset (its JSON is under 1 KB).
struct ShardedDatasetState {
  int64_t epoch = 0;         ///< the epoch the job is in
  int64_t position = 0;      ///< positions of the epoch's order the whole job consumed
  uint64_t seed = 0;         ///< the order's seed
  int64_t global_batch = 0;  ///< samples per step when it was saved
  int world_size = 0;        ///< the world size that saved it (information; any divisor of the global batch restores)
  int64_t seq_len = 0;       ///< the sample's length in tokens (0 for records)
  uint64_t samples = 0;      ///< samples in the data set
  uint64_t block = 0;        ///< the order's block
  uint64_t window_blocks = 0;  ///< the order's window, in blocks
  bool shuffle = true;       ///< whether the order is shuffled
  std::string data;          ///< the data's fingerprint (16 hex digits): shards' sizes and checksums (and a blend's weights)
  std::string tokenizer;     ///< the tokenizer's hash (16 hex digits), empty for records
  /// The state as a JSON object.
  std::string to_json() const;
  /// Parses to_json()'s text; throws cohort::ConfigError for anything else.
  static ShardedDatasetState from_json(const std::string& text);
};

/// A prepared data set as a torch::data stateful dataset of this rank's batches. A batch is an
/// Example: for tokens, data = inputs [B, seq_len] and target = the same shifted by one (int64);
/// for records, data = the records' bytes [B, record_bytes] (uint8) and target undefined. A handle:
/// copies share one state. Thread-safe.
class ShardedDataset : public torch::data::datasets::StatefulDataset<ShardedDataset, torch::data::Example<>, size_t>,
                       public Stateful {
 public:
  /// The data set in `dir` for the job `ctx` (cohort::init()'s). Throws ConfigError naming the
  /// file or option at fault: a manifest that does not parse, a missing or truncated shard, a bad
  /// index, a global batch the world size does not divide or larger than the data set.
  ShardedDataset(const std::string& dir, const std::shared_ptr<Context>& ctx, ShardedDatasetOptions options);
  /// Without a Context, for tests and tools: explicit rank and world size.
  ShardedDataset(const std::string& dir, int rank, int world_size, ShardedDatasetOptions options);
  /// A blend of several prepared data sets, all tokens with one tokenizer or all records of one
  /// size (ConfigError naming both otherwise). An epoch has as many samples as they have together;
  /// each data set goes through its own order at its own pace. The state covers the blend.
  ShardedDataset(const std::vector<BlendSource>& sources, const std::shared_ptr<Context>& ctx, ShardedDatasetOptions options);
  /// A blend, without a Context: explicit rank and world size.
  ShardedDataset(const std::vector<BlendSource>& sources, int rank, int world_size, ShardedDatasetOptions options);

  /// This rank's next batch; `batch_size` must be local_batch(). nullopt at the end of the epoch.
  /// A shard truncated under the job (its pages gone) is a ConfigError naming the shard and the rank.
  torch::optional<torch::data::Example<>> get_batch(size_t batch_size) override;
  /// Samples this rank reads in a whole epoch.
  torch::optional<size_t> size() const override;
  /// Called by the loader at each begin(): after a finished epoch, starts the next one; otherwise
  /// (a fresh start, a restored or interrupted epoch) continues where the job is. First checks that
  /// every shard is still the file opened (ConfigError naming a deleted, replaced or resized one).
  void reset() override;
  /// Writes state() into `archive`.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Continues from the state save() wrote, as load_state() does.
  void load(torch::serialize::InputArchive& archive) override;

  /// The state as JSON (cohort::Stateful, for the Checkpointer).
  std::string state_dict() const override;
  /// Continues from state_dict()'s JSON (cohort::Stateful).
  void load_state_dict(const std::string& state) override;
  /// What a checkpoint keeps.
  ShardedDatasetState state() const;
  /// Continues from `state`, saved at any world size that divides the global batch. Throws
  /// ConfigError naming what differs: the data set, the tokenizer, the sequence length, the order.
  void load_state(const ShardedDatasetState& state);

  /// The tokenizer's vocabulary (the manifest's vocab_size: token ids are below it); 0 for records.
  uint64_t vocab_size() const;
  /// Bytes per record; 0 for tokens.
  uint64_t record_bytes() const;
  /// The SentencePiece model the tokens were made with (a path in the data set's directory, for
  /// decoding them), or "" (the bytes tokenizer, records). A blend's sources share one tokenizer.
  std::string tokenizer_model() const;
  /// Samples per rank and step: global_batch / world size.
  int64_t local_batch() const;
  /// Global batches per epoch: samples / global_batch (the remainder is left out of the epoch).
  int64_t steps_per_epoch() const;
  /// Samples in an epoch: the data set's (token windows or records), or the blend's together.
  uint64_t samples() const;
  /// The current epoch.
  int64_t epoch() const;
  /// The sample (index in its data set) at position `position` of epoch `epoch`: the order itself.
  uint64_t sample_at(int64_t epoch, uint64_t position) const;
  /// The data set (index into the blend's sources; 0 without a blend) that position draws from.
  size_t source_at(int64_t epoch, uint64_t position) const;

 private:
  torch::optional<torch::data::Example<>> read_batch(size_t batch_size);
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort
