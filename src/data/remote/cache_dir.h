// data/remote/cache_dir.h — the local folder that remote shards are cached in, shared safely by
// the ranks of one machine: a byte limit over what it holds, least-recently-used eviction (by
// modification time, which a use refreshes), copies written under a temporary name and renamed,
// and lock files (flock) for the limit's bookkeeping and for each file being fetched. Torch-free.
//
// Layout: ROOT/.lock, and one folder per remote data set, ROOT/<XXH3 of its URL>/, marked by a
// file `.cohort-remote` that holds the URL. Only files inside marked folders — copies of files
// that have a remote copy — are counted and ever deleted: anything else under ROOT (a local data
// set, the user's files) is left alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace cohort::data {

/// An flock held on a file while the object lives. Move-only.
class FileLock {
 public:
  FileLock() = default;
  /// Opens (creating) `path` and takes an exclusive flock on it, waiting for another holder;
  /// throws cohort::ConfigError naming the file if it cannot be opened.
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

/// A data set's folder in a cache.
class CacheDir {
 public:
  /// The folder of `url` in the cache `root` (both created when missing); `limit` bytes over the
  /// whole cache, 0 for none. Throws cohort::ConfigError naming the folder if it cannot be made.
  CacheDir(const std::string& root, const std::string& url, uint64_t limit);
  const std::string& root() const { return root_; }
  /// ROOT/<hash>/name.
  std::string path(const std::string& name) const { return folder_ + "/" + name; }
  uint64_t limit() const { return limit_; }
  /// Waits for and holds the lock of `name` (ROOT/<hash>/name.lock): one process fetches a file
  /// at a time; the others wait, then find its copy.
  FileLock lock(const std::string& name) const;
  /// Makes room for `bytes` and reserves it: under the cache's lock, deletes the least recently
  /// used copies (of any data set in the cache) that `may_evict(path)` allows — it is asked in
  /// LRU order, and a `true` means that file goes — until the cache's copies and reservations
  /// plus `bytes` fit the limit. Then creates `name`'s temporary file at its full size (counted
  /// by every process from then on) and returns its path; "" when the room cannot be made.
  /// Temporary files of processes that are gone are deleted on the way.
  std::string reserve(const std::string& name, uint64_t bytes, const std::function<bool(const std::string&)>& may_evict);
  /// Renames the temporary file to `name` (atomic: readers see the whole copy or none; under the
  /// cache's lock, so that no scan misses it) and marks it used now.
  void commit(const std::string& part, const std::string& name) const;
  /// Marks a copy used now (its place in the LRU order, for every process).
  static void touch(const std::string& path);
  /// Bytes the cache holds now: copies and reservations in its marked folders.
  uint64_t used() const;

 private:
  std::string root_, folder_;
  uint64_t limit_;
};

}  // namespace cohort::data
