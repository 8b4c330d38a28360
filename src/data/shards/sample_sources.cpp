// A dataset's sources, blended. See sample_sources.h.
#include "data/shards/sample_sources.h"

#include "cohort/error.h"

namespace cohort::data {

SampleSources::SampleSources(const std::vector<SourceSpec>& specs, uint64_t window, uint64_t seed, OrderOptions order,
                             bool verify_checksums, const RemoteOptions& remote) {
  if (specs.empty()) throw ConfigError(-1, "no data set to read");
  std::vector<uint64_t> weights;
  std::string key;
  for (size_t d = 0; d < specs.size(); ++d) {
    sets_.push_back(std::make_unique<ShardSet>(specs[d].dir, window, verify_checksums, remote));
    const Manifest& m = sets_.back()->manifest();
    const Manifest& first = sets_[0]->manifest();
    names_ += (d ? " + " : "") + specs[d].dir;
    if (m.kind != first.kind || (!m.tokens() && m.item_bytes != first.item_bytes)) {
      throw ConfigError(-1, "a blend of unlike data sets: " + specs[0].dir + " holds " + first.kind + ", " + specs[d].dir +
                                " " + m.kind + (m.tokens() ? "" : " of " + std::to_string(m.item_bytes) + " bytes"));
    }
    if (m.tokens() && m.tokenizer.xxh3 != first.tokenizer.xxh3) {
      throw ConfigError(-1, "a blend of data sets with different tokenizers: " + specs[0].dir + " (" + hex64(first.tokenizer.xxh3) +
                                ") and " + specs[d].dir + " (" + hex64(m.tokenizer.xxh3) + "); prepare them with one tokenizer");
    }
    if (sets_.back()->samples() == 0) throw ConfigError(-1, specs[d].dir + ": no samples" + (m.tokens() ? " of " + std::to_string(window) + " tokens" : ""));
    // Each source has its own permutations (seeds apart), so that two copies of one data set in a
    // blend are not read in lockstep.
    orders_.emplace_back(sets_.back()->samples(), seed + d * 0x9e3779b97f4a7c15ULL, order);
    epoch_samples_ += sets_.back()->samples();
    weights.push_back(specs[d].weight);
    key += hex64(m.data_fingerprint()) + "*" + std::to_string(specs[d].weight) + ";";
  }
  try {
    blend_ = std::make_unique<Blend>(weights);
  } catch (const std::exception& e) {
    throw ConfigError(-1, names_ + ": " + e.what());
  }
  fingerprint_ = specs.size() == 1 ? hex64(sets_[0]->manifest().data_fingerprint()) : hex64(xxh3_64(key.data(), key.size()));
  if (tokens()) tokenizer_ = hex64(sets_[0]->manifest().tokenizer.xxh3);
}

SampleRef SampleSources::at(uint64_t epoch, uint64_t k) const {
  const uint64_t p = epoch * epoch_samples_ + k;
  const size_t d = blend_->source_at(p);
  const uint64_t c = blend_->count_before(d, p), n = orders_[d].size();
  return {d, orders_[d].sample_at(c / n, c % n)};
}

}  // namespace cohort::data
