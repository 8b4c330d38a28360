// data/remote/remote_shards.h — a prepared data set at an http(s) URL, read through a local
// cache folder (cache_dir.h): the manifest and the shards' indexes are fetched at open, each shard
// when it is first needed or asked for ahead (range requests: a broken transfer goes on from where
// it broke), checked against the manifest's XXH3 and mapped like a local shard. A shard in use is
// pinned: eviction never takes it. A copy found in the cache — from an earlier run, or another rank
// sharing the folder — is checked against the manifest before use; a corrupt one is fetched again.
// Torch-free. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/remote/cache_dir.h"
#include "data/remote/http_client.h"
#include "data/shards/manifest.h"
#include "data/shards/mapped_file.h"

namespace cohort::data {

/// Where and how a remote data set is cached and fetched.
struct RemoteOptions {
  std::string cache_dir;     ///< the cache folder (required for a URL)
  uint64_t cache_bytes = 0;  ///< its limit; 0 for none
  HttpPolicy http;           ///< retries, backoff, timeouts
  int rank = -1;             ///< for messages
};

class RemoteShards;

/// A shard's mapping, kept from eviction while this lives (a local shard's: no owner). Move-only.
class ShardPin {
 public:
  ShardPin() = default;
  ShardPin(const MappedFile* file, RemoteShards* owner, size_t shard) : file_(file), owner_(owner), shard_(shard) {}
  ~ShardPin();
  ShardPin(ShardPin&& other) noexcept : file_(other.file_), owner_(other.owner_), shard_(other.shard_) {
    other.owner_ = nullptr;
    other.file_ = nullptr;
  }
  ShardPin& operator=(ShardPin&&) = delete;
  ShardPin(const ShardPin&) = delete;
  const MappedFile& file() const { return *file_; }
  const uint8_t* data() const { return file_ ? file_->data() : nullptr; }
  explicit operator bool() const { return file_ != nullptr; }

 private:
  const MappedFile* file_ = nullptr;
  RemoteShards* owner_ = nullptr;
  size_t shard_ = 0;
};

/// One remote data set and its copies in the cache.
class RemoteShards {
 public:
  /// Fetches URL/manifest.json (with the policy's retries) and checks the cache's limit: below
  /// the largest shard plus the indexes it is refused (cohort::ConfigError, one line). A server
  /// that does not answer is a cohort::CommError naming the URL.
  RemoteShards(const std::string& url, const RemoteOptions& options);
  ~RemoteShards();
  RemoteShards(const RemoteShards&) = delete;
  RemoteShards& operator=(const RemoteShards&) = delete;

  const Manifest& manifest() const { return manifest_; }
  /// The data set's URL, ending in '/'.
  const std::string& url() const { return url_; }
  /// Shard s's index: its cached copy (checked) or fetched, mapped, and never evicted while this lives.
  MappedFile index(size_t s);
  /// Shard s, mapped and pinned: from memory, a fetch in flight (waited for; its error is thrown),
  /// the cache (checked), or fetched now. A failed fetch throws cohort::CommError naming the URL,
  /// the shard and the rank.
  ShardPin pin(size_t s);
  /// Shard s pinned if it is mapped here; empty otherwise (nothing is fetched).
  ShardPin pin_if_mapped(size_t s);
  /// Fetches shard s ahead of its use, if it is not here and room can be made without evicting
  /// the shards in `keep` (those needed sooner). Errors are kept for pin() to throw, not thrown.
  void prefetch(size_t s, const std::vector<size_t>& keep) noexcept;
  /// Shards fetched from the server by this object (tests: a cache hit fetches none).
  uint64_t fetched() const;

 private:
  friend class ShardPin;
  friend struct RemoteRegistry;
  enum class State { kAbsent, kFetching, kMapped };
  struct Slot {
    State state = State::kAbsent;
    MappedFile map;
    int pins = 0;
    uint64_t inode = 0;
    std::chrono::steady_clock::time_point checked;
    std::string error;  // the last failed fetch's
  };
  void unpin(size_t s);
  // Fetches (or finds) shard s and maps it. With `keep` (a prefetch), gives up — false — when
  // room cannot be made without evicting those shards.
  bool fetch(size_t s, const std::vector<size_t>* keep);
  // A file of the data set, from the cache (checked) or the server, mapped. *no_room when a
  // prefetch (keep != nullptr) found no room.
  MappedFile fetch_file(const FileEntry& e, const std::vector<size_t>* keep, bool* no_room);
  // Whether `path` may be deleted from the cache as far as this object is concerned (not pinned,
  // not being fetched, not an index, not in `keep`); when it may, its mapping is dropped. Called
  // under the cache's lock with the registry's held.
  bool release_for_eviction(const std::string& path, const std::vector<size_t>* keep);
  std::unique_ptr<HttpClient> take_client();
  void return_client(std::unique_ptr<HttpClient> c);
  [[noreturn]] void fail(size_t s, const std::string& problem) const;

  std::string url_;
  RemoteOptions options_;
  Manifest manifest_;
  std::unique_ptr<CacheDir> cache_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  std::vector<std::string> index_paths_;
  std::vector<std::unique_ptr<HttpClient>> clients_;
  uint64_t fetched_ = 0;
};

}  // namespace cohort::data
