// data/prepare/shard_writer.h — writes a data set's shards (rolling to a new one at a size), their
// indexes and checksums as it goes, and manifest.json last: a data set without a manifest is one
// whose writing did not finish, and readers refuse it. Torch-free.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/shards/manifest.h"

struct XXH3_state_s;

namespace cohort::data {

/// Writes shards into a directory. Not thread-safe: one writer, fed in the data set's order.
class ShardWriter {
 public:
  /// Shards of `base`'s kind and item size (its shard list is ignored) into `dir`, which must
  /// exist; each shard at most `shard_bytes` (rounded down to whole items, at least one item).
  ShardWriter(std::string dir, Manifest base, uint64_t shard_bytes);
  /// Removes the files written if finish() was not reached (an error midway leaves nothing).
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Appends tokens of the current document (each < 2^(8 × item size)).
  void add_tokens(const uint32_t* tokens, uint64_t n);
  /// Ends the current document (an empty one is not counted).
  void end_document();
  /// Appends `n` records of item_bytes each.
  void add_records(const uint8_t* records, uint64_t n);
  /// Closes the last shard and writes manifest.json (through a rename); returns the manifest.
  /// Throws std::runtime_error when nothing was written.
  Manifest finish();

 private:
  void open_shard();
  void close_shard();
  void write(const void* p, uint64_t bytes);
  std::string dir_;
  Manifest manifest_;
  uint64_t max_items_;
  std::FILE* file_ = nullptr;
  XXH3_state_s* hash_ = nullptr;
  uint64_t items_ = 0;                 // in the open shard
  std::vector<uint64_t> offsets_;      // the open shard's document starts
  std::vector<std::string> written_;  // files, for the cleanup after an error
  std::vector<uint8_t> buffer_;
  bool finished_ = false;
};

}  // namespace cohort::data
