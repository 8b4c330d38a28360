// data/prepare/prepare.h — what `cohort data prepare` does: text → token shards (bytes or
// SentencePiece, tokenized in parallel over the cores, the output the same for any thread count),
// binary files → fixed-size record shards (raw, or IDX files side by side, gzipped or not).
// Torch-free. The command line is tools/data_command.cpp; the format data/shards/.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "data/shards/manifest.h"

namespace cohort::data {

/// What to prepare, and how.
struct PrepareOptions {
  std::vector<std::string> inputs;   ///< files and directories
  std::string out;                   ///< the data set's directory (created; must not hold a manifest yet)
  std::string tokenizer = "bytes";   ///< "bytes", or a SentencePiece .model file
  uint64_t vocab = 0;                ///< > 0: train a BPE tokenizer of this many pieces on the inputs
  int threads = 0;                   ///< 0: the machine's cores
  uint64_t shard_bytes = 256ull << 20;
  uint64_t chunk_bytes = 4ull << 20;  ///< text per tokenizing task (whole lines); not a thread count
  uint64_t record_bytes = 0;         ///< > 0: the inputs are raw records of this size
  bool idx = false;                  ///< the inputs are IDX files whose items make one record together
};

/// Prepares the data set; progress lines go to `log`. Throws std::runtime_error (or
/// cohort::ConfigError) with one line naming the file at fault; leaves no shard behind then.
Manifest prepare(const PrepareOptions& options, std::ostream& log);

/// Records from IDX files (gzipped or not) read side by side: record i is item i of each file,
/// concatenated. Used by prepare() with options.idx.
Manifest prepare_idx_records(const PrepareOptions& options, std::ostream& log);

}  // namespace cohort::data
