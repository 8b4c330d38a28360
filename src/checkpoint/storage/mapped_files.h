// checkpoint/storage/mapped_files.h — a snapshot's files written through shared mappings: the
// capture copies the live tensors straight into the pages of the file that the writer thread then
// hashes and renames into its checkpoint. On tmpfs those pages are the storage, so against staging
// memory and write() this is one copy of every byte fewer per snapshot, and the writer's
// page-cache copy (the kernel's largest share of a snapshot every step) is gone.
//
// The mappings are kept between saves: a snapshot every step overwrites the files of the one it
// retired (the same three inodes come back), and a kept mapping spares mapping and faulting in
// their pages each time. A mapping whose file was deleted (retention, a restore that dropped newer
// snapshots) is let go at the next save, so its pages are freed within one save.
// Not here: what goes in the files (tensor_file.h), the commit (save_write.cpp). No torch here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/storage/file_io.h"

namespace cohort::ckpt {

/// One file mapped for writing, `bytes` long, its pages reserved.
struct Mapping {
  int fd = -1;
  char* data = nullptr;
  uint64_t bytes = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t last_used = 0;  // the save that last wrote it (FileMappings::begin_save)
};

class FileMappings {
 public:
  explicit FileMappings(int rank) : rank_(rank) {}
  ~FileMappings();
  FileMappings(const FileMappings&) = delete;
  FileMappings& operator=(const FileMappings&) = delete;

  /// Lets go of the mappings of deleted files and of files no save wrote in the last few (they
  /// left the rotation). Call before the save's map()s; a Mapping stays valid until the next call.
  void begin_save();
  /// `path` — taken over when it is a regular file (a retired snapshot's), else made — sized to
  /// `bytes`, its pages reserved and mapped. The reservation (fallocate) comes before the mapping,
  /// so a full file system is a CheckpointError here ("No space left on device") and never a
  /// SIGBUS at a write; so is a file system without fallocate (the caller writes the file instead).
  Mapping& map(const std::string& path, uint64_t bytes);
  /// Commits a mapped file: hashes its bytes, fsyncs them (written through the mapping: durable
  /// on a disk too), and renames `from` (the path it was mapped at) to `dir/name`. The directory
  /// still needs fsync_dir(). The mapping stays for the next save that takes the file over. A
  /// CheckpointError when the file renamed is not the mapped one (another was moved to `from`).
  FileRecord commit(const Mapping& m, const std::string& from, const std::string& dir, const std::string& name);
  size_t size() const { return mappings_.size(); }

 private:
  void drop(size_t k);
  const int rank_;
  int64_t saves_ = 0;
  std::vector<std::unique_ptr<Mapping>> mappings_;  // stable addresses: a save holds several
};

}  // namespace cohort::ckpt
