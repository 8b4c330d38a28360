// data/shards/sample_sources.h — what a ShardedDataset reads: one prepared data set, or several
// blended with weights, each with its own order, behind one function of (epoch, position).
// Torch-free.
//
// An epoch of the blend has as many positions as the sources have samples together. Position k of
// epoch e is blend position P = e·E + k; it draws from source d = Blend::source_at(P) its draw
// c = C_d(P), which is position c mod N_d of that source's own epoch ⌊c / N_d⌋. So each source
// goes through its own fresh permutations at its own pace, and with one source this is simply
// that source's order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shards/blend.h"
#include "data/shards/global_order.h"
#include "data/shards/shard_set.h"

namespace cohort::data {

/// One prepared data set and its weight in a blend.
struct SourceSpec {
  std::string dir;
  uint64_t weight = 1;
};

/// Where a position's sample is.
struct SampleRef {
  size_t source = 0;
  uint64_t sample = 0;  // in that source
};

/// The sources of a dataset, opened, checked against each other, and ordered.
class SampleSources {
 public:
  /// Opens every source (ShardSet's errors, naming the file) and checks that they are alike:
  /// all tokens with one tokenizer, or all records of one size (cohort::ConfigError naming both
  /// directories otherwise). `window`: tokens per sample (ignored for records). `remote`: how
  /// sources at http(s) URLs are cached and fetched.
  SampleSources(const std::vector<SourceSpec>& specs, uint64_t window, uint64_t seed, OrderOptions order,
                bool verify_checksums, const RemoteOptions& remote = {});

  /// Positions per epoch: the samples of all sources.
  uint64_t epoch_samples() const { return epoch_samples_; }
  /// The sample at position k of epoch e.
  SampleRef at(uint64_t epoch, uint64_t k) const;
  const ShardSet& source(size_t d) const { return *sets_[d]; }
  size_t sources() const { return sets_.size(); }
  bool tokens() const { return sets_[0]->manifest().tokens(); }
  /// 16 hex digits: the data (with one source, its manifest's data_fingerprint(); for a blend, a
  /// hash of every source's and its weight).
  const std::string& fingerprint() const { return fingerprint_; }
  /// 16 hex digits: the tokenizer's hash; empty for records.
  const std::string& tokenizer() const { return tokenizer_; }
  /// The directories, for messages: "data/a" or "data/a + data/b".
  const std::string& names() const { return names_; }

 private:
  std::vector<std::unique_ptr<ShardSet>> sets_;
  std::vector<GlobalOrder> orders_;
  std::unique_ptr<Blend> blend_;
  uint64_t epoch_samples_ = 0;
  std::string fingerprint_, tokenizer_, names_;
};

}  // namespace cohort::data
