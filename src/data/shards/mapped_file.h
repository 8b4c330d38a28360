// data/shards/mapped_file.h — a shard file memory-mapped read-only, its size checked against what
// the manifest says. The page cache holds what was read; nothing is copied into the process, so a
// data set larger than memory costs no more resident memory than a small one. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort::data {

/// A read-only mapping of a whole regular file. Move-only; unmaps on destruction. A file deleted
/// while mapped stays readable (the mapping holds its inode); one truncated while mapped is not:
/// read it through copy(), which turns the SIGBUS of a page past the new end into an error naming
/// the file (guarded_read.h), and ask changed() before a new pass over it.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path` if it is a regular file of exactly `expected_bytes`; throws cohort::ConfigError
  /// "<label>: <problem>" otherwise ("truncated: 100 bytes, the manifest says 4096", ...).
  MappedFile(const std::string& path, uint64_t expected_bytes, const std::string& label);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  /// Copies `n` bytes at `offset` into `out`. Throws cohort::ConfigError "<label>: <problem>" when
  /// the file was truncated under the mapping (the pages are gone).
  void copy(uint64_t offset, void* out, size_t n) const;
  /// Whether the path still names the file that was mapped, as it was: "" when it does, else the
  /// problem ("deleted while the job read it", "replaced by another file ...", "truncated ...").
  std::string changed() const;
  /// XXH3-64 of the whole file, read through the mapping in pieces (pages are dropped after).
  uint64_t xxh3() const;

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_, label_;
  uint64_t device_ = 0, inode_ = 0;  // the file mapped, to tell it from another one at `path_` later
};

}  // namespace cohort::data
