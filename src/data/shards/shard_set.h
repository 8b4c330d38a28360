// data/shards/shard_set.h — a prepared data set opened for reading: its manifest, every shard
// memory-mapped (never read whole), sizes and document indexes checked at open, checksums when
// asked (verify(), `cohort data verify`). Samples are numbered across shards in manifest order.
// A data set at an http(s) URL is read through a local cache (data/remote/remote_shards.h): its
// shards are fetched when first read (or asked for ahead) and pinned while a read copies from
// them. Torch-free.
//
// A token sample is a window of `window` tokens (seq_len + 1: inputs and the targets shifted by
// one); windows start every window - 1 tokens inside a shard and never cross into the next one
// (a shard's last window - 1 tokens at most are left out). A record sample is one record.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/remote/remote_shards.h"
#include "data/shards/manifest.h"
#include "data/shards/mapped_file.h"

namespace cohort::data {

/// Checks a token shard's index: documents + 1 little-endian uint64 offsets at `offsets` that
/// start at 0, never decrease and end at `tokens`. Throws cohort::ConfigError "<label>: <problem>".
void check_document_index(const uint8_t* offsets, uint64_t documents, uint64_t tokens, const std::string& label);

/// A prepared data set, mapped.
class ShardSet {
 public:
  /// Opens the data set in `dir` with token windows of `window` tokens (ignored for records; at
  /// least 2 for tokens). Throws cohort::ConfigError naming the file: a manifest that does not
  /// parse, a missing or truncated shard, an index that points past its shard's end; with
  /// `verify_checksums` also a shard whose XXH3 is not the manifest's. `dir` may be an http(s)
  /// URL: then `remote` says how it is cached and fetched (remote shards are always checked
  /// against the manifest before their first use, so `verify_checksums` adds nothing there).
  ShardSet(const std::string& dir, uint64_t window, bool verify_checksums = false, const RemoteOptions& remote = {});

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  /// Samples in the data set: token windows or records.
  uint64_t samples() const { return starts_.back(); }
  /// Token sample `i`'s window - 1 + 1 tokens, widened to int64 into `out` (window values).
  /// Reads through MappedFile::copy: a shard truncated under the job throws ConfigError naming it.
  void read_tokens(uint64_t i, int64_t* out) const;
  /// Where sample `i`'s bytes are in its mapped shard, and how many (for reading ahead). Local
  /// data sets only: a remote shard's mapping lasts while it is pinned (prefetch_shard()).
  std::pair<const uint8_t*, uint64_t> sample_bytes(uint64_t i) const;
  /// Record `i`'s item_bytes bytes, in the mapping (tests, local data sets; read_record() for the guarded copy).
  const uint8_t* record(uint64_t i) const;
  /// Copies record `i`'s item_bytes bytes into `out`.
  void read_record(uint64_t i, uint8_t* out) const;
  /// Whether the shards are remote (read through the cache).
  bool remote() const { return remote_ != nullptr; }
  /// The remote data set, or nullptr for a local one.
  RemoteShards* remote_shards() const { return remote_.get(); }
  /// The shard sample `i` is in.
  size_t shard_of(uint64_t i) const;
  /// Remote: fetches shard `s` into the cache ahead of its use without evicting `keep` (the
  /// shards needed sooner); errors wait for the read that needs it. Local: nothing.
  void prefetch_shard(size_t s, const std::vector<size_t>& keep) const;
  /// Checks that every shard and index path still names the file mapped at open, at its size;
  /// throws cohort::ConfigError naming the first that was deleted, replaced or resized. A pass
  /// over the data (an epoch) starts with this: a deleted shard stays readable through its
  /// mapping, but the job could not open the data set again (a restart, a resume), so it stops
  /// here, by name, rather than at some later restart.
  void check_files() const;
  /// Shard `s`'s document offsets (documents + 1 values), or nullptr for records.
  const uint64_t* document_offsets(size_t s) const;
  /// Unmaps the 2 MiB chunks of the mapping `samples` lie in (what the kernel maps on a fault can
  /// reach that far: fault-around, large folios) from this process
  /// (madvise DONTNEED on the merged ranges): they stay in the page cache, and a later read is a
  /// minor fault. Read pages of a shared file mapping count in the resident set until then;
  /// releasing what was read keeps the resident set flat however large the data set is.
  void release_samples(std::vector<uint64_t> samples) const;
  /// Checks every shard's (and index's) XXH3 against the manifest; throws ConfigError naming the
  /// first that differs.
  void verify() const;

 private:
  std::string dir_;
  Manifest manifest_;
  uint64_t window_ = 0;
  // Shard s's bytes, pinned while the result lives (local shards: always mapped).
  ShardPin shard(size_t s) const;
  // The shard and byte offset in it of sample i.
  std::pair<size_t, uint64_t> locate(uint64_t i) const;
  std::unique_ptr<RemoteShards> remote_;
  std::vector<MappedFile> shards_, indexes_;  // remote: indexes only
  std::vector<uint64_t> starts_;  // samples before shard s; starts_.back() = samples()
};

}  // namespace cohort::data
