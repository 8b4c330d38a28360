// The text the GPT example learns from, as byte tokens, and the windows it trains on.
//
// The default corpus is Debian's `fortunes` package (/usr/share/games/fortunes): about 4 MB of
// English quotations, jokes and verse in 50-odd files, public, installed with one apt-get, varied
// enough that a small model's loss keeps falling for thousands of steps. A file or a directory of
// files (every file not ending in .dat, the fortune index, read in name order; subdirectories
// and symbolic links skipped, anything else not a regular file refused) may be given instead. Fortunes are separated by lines holding "%"; every 20th one goes to the
// validation split, so that both splits cover every file. Tokens are bytes (vocabulary 256): no
// tokenizer to train or to save, and any text works.
#pragma once

#include <cohort/sharded_dataset.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct Corpus {
  torch::Tensor train, val;  // uint8 token streams
  int64_t files = 0;
  /// Entropy of the training split's byte frequencies, in nats: what a model that ignores context
  /// achieves at best. A language model must get below it.
  double unigram_entropy = 0;
  /// --data: the prepared data set the training reads instead of `train` (train_data.h), and its
  /// SentencePiece model ("" for bytes); `val` then holds validation tokens of any vocabulary.
  std::shared_ptr<cohort::ShardedDataset> prepared;
  std::string tokenizer_model;
};

/// Reads and splits `path`. Throws cohort::ConfigError naming the rank and the problem: the path
/// missing, unreadable, not a regular file (a FIFO, a device; in a directory too), over 1 GiB
/// (cohort/data_file.h), or without text.
Corpus load_corpus(const std::string& path, int rank);

/// Training windows: window i is tokens [i·T, i·T + T] (T + 1 tokens: inputs and next-token
/// targets), non-overlapping; a batch gathers the windows the sampler picked.
class TokenWindows
    : public torch::data::datasets::BatchDataset<TokenWindows, torch::data::Example<>, std::vector<size_t>> {
 public:
  TokenWindows(torch::Tensor tokens, int64_t seq_len);
  torch::data::Example<> get_batch(std::vector<size_t> indices) override;
  torch::optional<size_t> size() const override { return static_cast<size_t>(count_); }

 private:
  torch::Tensor tokens_;
  int64_t seq_len_, count_;
};
