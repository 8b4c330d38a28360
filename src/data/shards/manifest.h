// data/shards/manifest.h — a prepared data set's manifest.json: what its shards are (file, bytes,
// items, XXH3-64), their element type, and the tokenizer by its hash. Torch-free.
//
// A token shard is a flat file of little-endian uint16 (vocabulary < 65536) or uint32 tokens, with
// an index file beside it: documents + 1 little-endian uint64 token offsets (0 first, the shard's
// token count last, never decreasing). A record shard is a flat file of fixed-size records and has
// no index. Nothing else is in a shard, so that it can be memory-mapped and read like `dd` reads it.
// The manifest is parsed with a depth cap and every field checked; a shard's file must be a plain
// name inside the data set's directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::data {

/// One file of a data set: its name inside the directory, size and XXH3-64.
struct FileEntry {
  std::string file;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

/// One shard: its data file, items (tokens or records) and, for tokens, its document index.
struct ShardEntry {
  FileEntry data;
  uint64_t items = 0;
  FileEntry index;         // tokens only (file empty for records)
  uint64_t documents = 0;  // tokens only
};

/// The tokenizer a token data set was prepared with.
struct TokenizerEntry {
  std::string kind;     // "bytes" or "sentencepiece"
  std::string file;     // sentencepiece: the model, copied into the data set ("tokenizer.model")
  uint64_t xxh3 = 0;    // the model file's XXH3-64; bytes: the XXH3-64 of "bytes"
  int64_t eos_id = -1;  // appended after every line (sentencepiece), -1 for none
};

/// A data set's manifest.
struct Manifest {
  std::string kind = "tokens";  // "tokens" or "records"
  uint64_t item_bytes = 2;      // bytes per item: 2 or 4 per token, the record size for records
  uint64_t vocab_size = 0;      // tokens only
  TokenizerEntry tokenizer;     // tokens only
  std::vector<ShardEntry> shards;

  bool tokens() const { return kind == "tokens"; }
  uint64_t items() const;
  uint64_t documents() const;
  /// XXH3-64 of what the data is (kind, element size, every shard's bytes, items and checksum;
  /// not the file names): equal fingerprints mean the same samples in the same places.
  uint64_t data_fingerprint() const;
  /// The JSON text of manifest.json.
  std::string to_json() const;
  /// Parses manifest.json's text; throws std::runtime_error with the problem (no file name).
  static Manifest parse(const std::string& text);
};

/// "manifest.json" in `dir`, parsed; throws cohort::ConfigError "DIR/manifest.json: <problem>".
Manifest read_manifest(const std::string& dir);

/// 16 lowercase hex digits.
std::string hex64(uint64_t v);
/// XXH3-64 of a byte range.
uint64_t xxh3_64(const void* data, uint64_t bytes);
/// The dtype's name for a token size: "uint16", "uint32".
const char* token_dtype(uint64_t item_bytes);

}  // namespace cohort::data
