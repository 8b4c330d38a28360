// Durable, atomic file writes for checkpoints, and the content hash that vouches for them.
//
// A file is written under a temporary name in its final directory, hashed as it goes (with
// O_DIRECT where the file system takes it: direct_writer.h), fsynced, and renamed over its final name; the directory is fsynced by the caller once all its renames are
// done (one fsync for many files). Until the rename nothing under the final name exists, so a
// crash leaves at most a `*.tmp-*` file that listing and retention ignore and clean up.
// The hash is XXH3-64 from libxxhash (about 30 GB/s per core, far faster than any disk here).
// Not here: what the files contain (safetensors.h, manifest.h). Internal header, no torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cohort::ckpt {

class DirectWriter;

/// A committed file as the manifest lists it.
struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

/// 16 lower-case hex digits, and back (throws std::invalid_argument on bad text).
std::string to_hex(uint64_t value);
uint64_t from_hex(const std::string& text);

/// Incremental XXH3-64.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Writes `dir/name` atomically. Every failure is a CheckpointError naming the file and the
/// reason (for a full disk: "No space left on device"); the temporary file is removed then, and
/// also when the writer is destroyed before finish(). Everything goes through a descriptor of `dir`
/// opened with O_NOFOLLOW (a `dir` that is a symbolic link is a CheckpointError naming it), the
/// temporary file is created with O_EXCL | O_NOFOLLOW and renamed over `name`: no byte is written
/// through a link, whether the directory or a file in it is one.
class AtomicWriter {
 public:
  /// `allow_direct`: O_DIRECT where the file system takes it (and COHORT_CKPT_DIRECT_IO is not 0).
  /// `reuse`: a regular file no checkpoint lists any more (a retired snapshot's), taken over as the
  /// temporary file and overwritten in place when it can be (else a new file is made): on tmpfs its
  /// pages are the storage, and writing into them spares allocating, zeroing and freeing as many.
  AtomicWriter(const std::string& dir, const std::string& name, int rank, bool allow_direct = true,
               const std::string& reuse = "");
  /// Whether the bytes go to the device with O_DIRECT (else through the page cache).
  bool direct() const { return direct_ != nullptr; }
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(const void* data, size_t bytes);
  /// fsync, close and rename into place. The directory still needs fsync_dir().
  FileRecord finish();

 private:
  void fail(const std::string& what, int err);
  void discard();  // closes and removes the temporary file and the directory's descriptor
  std::string dir_, name_, tmp_name_, tmp_path_;
  int rank_;
  int dir_fd_ = -1;
  int fd_ = -1;
  bool reused_ = false;  // fd_ is a taken-over file: finish() cuts it to the bytes written
  uint64_t bytes_ = 0;
  Hasher hasher_;
  std::unique_ptr<DirectWriter> direct_;  // null: through the page cache
};

/// Makes the renames and removals in `dir` durable. Throws CheckpointError.
void fsync_dir(const std::string& dir, int rank);

/// Opens a file of a checkpoint for reading: a regular file only. A symlink (it may point out of
/// the checkpoint directory), a FIFO (reading would wait forever) or a device (/dev/zero: endless)
/// is a CheckpointError naming it, as is a file that cannot be opened. *bytes gets its size.
int open_checkpoint_file(const std::string& path, int rank, uint64_t* bytes);

/// Reads up to `n` bytes at `offset` (retrying short reads and EINTR); returns how many it read,
/// fewer at the end of the file or on an error.
size_t read_at_most(int fd, char* out, size_t n, uint64_t offset);

/// The whole of a small checkpoint file (a manifest) through open_checkpoint_file; a file larger
/// than `max_bytes` is a CheckpointError instead of an allocation of its size.
std::string read_small_file(const std::string& path, uint64_t max_bytes, int rank);

/// Size and XXH3-64 of a file as it is on disk. Throws CheckpointError if it cannot be read.
FileRecord hash_file(const std::string& dir, const std::string& name, int rank);

/// Temporary names this module creates: `<name>.tmp-<pid>-<n>`.
bool is_temporary_name(const std::string& name);

}  // namespace cohort::ckpt
