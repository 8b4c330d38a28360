// A snapshot's files written through shared mappings. See mapped_files.h.
#include "checkpoint/storage/mapped_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::ckpt {
namespace {

// A file leaves the rotation of a snapshot every step (two kept, one being written) when no save
// wrote it for this many: it was deleted or is kept by a checkpoint that stays.
constexpr int64_t kIdleSaves = 4;

}  // namespace

FileMappings::~FileMappings() {
  while (!mappings_.empty()) drop(mappings_.size() - 1);
}

void FileMappings::drop(size_t k) {
  ::munmap(mappings_[k]->data, mappings_[k]->bytes);
  ::close(mappings_[k]->fd);
  mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(k));
}

void FileMappings::begin_save() {
  ++saves_;
  for (size_t k = mappings_.size(); k-- > 0;) {
    struct stat st {};
    const bool deleted = ::fstat(mappings_[k]->fd, &st) != 0 || st.st_nlink == 0;
    if (deleted || saves_ - mappings_[k]->last_used > kIdleSaves) drop(k);
  }
}

Mapping& FileMappings::map(const std::string& path, uint64_t bytes) {
  auto fail = [&](const char* what, int err, int fd) -> Mapping& {
    if (fd >= 0) ::close(fd);
    throw CheckpointError(rank_, std::string("could not ") + what + " " + path + ": " + std::strerror(err));
  };
  // Regular files only, checked on the open file (O_NOFOLLOW: never a link's target).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return fail("open", errno, -1);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail("stat", errno, fd);
  if (!S_ISREG(st.st_mode)) return fail("map", EINVAL, fd);
  for (size_t k = 0; k < mappings_.size(); ++k) {
    Mapping& m = *mappings_[k];
    if (m.dev != st.st_dev || m.ino != st.st_ino) continue;
    if (m.bytes == bytes && static_cast<uint64_t>(st.st_size) == bytes) {
      ::close(fd);  // the kept mapping's descriptor is the same file
      m.last_used = saves_;
      return m;
    }
    drop(k);  // another size: mapped again below
    break;
  }
  // A taken-over file may have been longer: its tail is not this file's.
  if (static_cast<uint64_t>(st.st_size) != bytes && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return fail("resize", errno, fd);
  // Every page exists before the first write through the mapping (tmpfs would otherwise allocate
  // it at the fault, and a full one answers that with SIGBUS).
  // fallocate(2), not posix_fallocate: where a file system has none, glibc would write zeros instead.
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) return fail("reserve space for", errno, fd);
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (data == MAP_FAILED) return fail("map", errno, fd);
  mappings_.push_back(std::make_unique<Mapping>(Mapping{fd, static_cast<char*>(data), bytes, st.st_dev, st.st_ino, saves_}));
  return *mappings_.back();
}

FileRecord FileMappings::commit(const Mapping& m, const std::string& from, const std::string& dir,
                                const std::string& name) {
  Hasher hasher;
  hasher.update(m.data, m.bytes);
  const std::string to = dir + "/" + name;
  if (::fsync(m.fd) != 0) {
    const int err = errno;
    throw CheckpointError(rank_, "could not fsync " + from + ": " + std::strerror(err));
  }
  // Into `dir` itself, never a link's target (AtomicWriter's rule): a link there is an error naming it.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    const std::string why = err == ELOOP || err == ENOTDIR ? " is a symbolic link or not a directory"
                                                           : std::string(": ") + std::strerror(err);
    throw CheckpointError(rank_, "could not commit " + to + ": " + dir + why);
  }
  const int renamed = ::renameat(AT_FDCWD, from.c_str(), dir_fd, name.c_str());
  const int err = errno;
  ::close(dir_fd);
  if (renamed != 0) throw CheckpointError(rank_, "could not rename " + from + " to " + to + ": " + std::strerror(err));
  // What was renamed is the file these bytes are in, not one put at `from` meanwhile (a retired
  // file moved there by a commit this rank stopped waiting for): else the hash would be of other bytes.
  struct stat st {};
  if (::stat(to.c_str(), &st) != 0 || st.st_dev != m.dev || st.st_ino != m.ino)
    throw CheckpointError(rank_, "could not commit " + to + ": another file replaced " + from + " while it was written");
  return {name, m.bytes, hasher.digest()};
}

}  // namespace cohort::ckpt
