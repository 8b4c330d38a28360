#include "checkpoint/storage/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>  // XXH3_64bits streaming

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "checkpoint/storage/direct_writer.h"
#include "cohort/error.h"

namespace cohort::ckpt {
namespace {

std::atomic<uint64_t> g_tmp_counter{0};
constexpr size_t kHashChunk = 4u << 20;  // hash and write in slices that stay in cache

std::string describe(int err) { return std::strerror(err); }

// O_DIRECT unless COHORT_CKPT_DIRECT_IO=0 (direct_writer.h says why; the switch is for measuring
// and for file systems that take O_DIRECT but serve it badly).
bool direct_io_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("COHORT_CKPT_DIRECT_IO");
    return !(v && std::string(v) == "0");
  }();
  return wanted;
}

}  // namespace

std::string to_hex(uint64_t value) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return hex;
}

uint64_t from_hex(const std::string& text) {
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw std::invalid_argument("not 16 lower-case hex digits: \"" + text + "\"");
  return std::stoull(text, nullptr, 16);
}

struct Hasher::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

Hasher::Hasher() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->s); }
Hasher::~Hasher() = default;
void Hasher::update(const void* data, size_t bytes) { XXH3_64bits_update(state_->s, data, bytes); }
uint64_t Hasher::digest() const { return XXH3_64bits_digest(state_->s); }

AtomicWriter::AtomicWriter(const std::string& dir, const std::string& name, int rank, bool allow_direct,
                           const std::string& reuse)
    : dir_(dir), name_(name), rank_(rank) {
  tmp_name_ = name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_tmp_counter++);
  tmp_path_ = dir + "/" + tmp_name_;
  dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd_ < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR)
      throw CheckpointError(rank_, "could not write " + dir + "/" + name + ": " + dir + " is a symbolic link or not a "
                                   "directory (cohort writes checkpoints into real directories only; remove it)");
    throw CheckpointError(rank_, "could not open directory " + dir + ": " + describe(err));
  }
  // O_EXCL | O_NOFOLLOW: a new file of our own, never an existing one or a link's target.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  struct stat reused {};
  if (!reuse.empty() && ::lstat(reuse.c_str(), &reused) == 0 && S_ISREG(reused.st_mode) &&
      ::renameat(AT_FDCWD, reuse.c_str(), dir_fd_, tmp_name_.c_str()) == 0) {
    // Regular files only: checked again on the open file (the name may have changed in between);
    // anything else is dropped and a new file made.
    fd_ = ::openat(dir_fd_, tmp_name_.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) {
      reused_ = true;
      return;
    }
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
  }
  auto create = [&](int flags) {
    fd_ = ::openat(dir_fd_, tmp_name_.c_str(), flags, 0644);
    if (fd_ < 0 && errno == EEXIST) {  // a crashed writer's of the same pid, or a link put there: gone, not followed
      ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
      fd_ = ::openat(dir_fd_, tmp_name_.c_str(), flags, 0644);
    }
  };
  if (allow_direct && direct_io_wanted()) {
    create(kFlags | O_DIRECT);
    if (fd_ >= 0) {
      direct_ = std::make_unique<DirectWriter>(fd_);
    } else if (errno == EINVAL) {  // a file system without O_DIRECT (ramfs, some FUSE): the page cache
      create(kFlags);
    }
  } else {
    create(kFlags);
  }
  if (fd_ < 0) {
    const int err = errno;
    ::close(dir_fd_);
    throw CheckpointError(rank_, "could not create " + tmp_path_ + ": " + describe(err));
  }
}

AtomicWriter::~AtomicWriter() {
  direct_.reset();  // its I/O thread stops before the file is closed
  discard();
}

void AtomicWriter::discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    fd_ = -1;
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
}

void AtomicWriter::fail(const std::string& what, int err) {
  if (direct_) bytes_ = direct_->bytes_written();
  direct_.reset();
  discard();
  throw CheckpointError(rank_, "could not " + what + " " + dir_ + "/" + name_ + ": " + describe(err) +
                                   " (after " + std::to_string(bytes_) + " bytes; nothing was committed)");
}

void AtomicWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t slice = bytes < kHashChunk ? bytes : kHashChunk;
    hasher_.update(p, slice);
    if (direct_) {
      if (const int err = direct_->write(p, slice)) fail("write", err);
      bytes_ += slice;
      p += slice;
      bytes -= slice;
      continue;
    }
    size_t done = 0;
    while (done < slice) {
      const ssize_t n = ::write(fd_, p + done, slice - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("write", errno);
      }
      if (n == 0) fail("write", ENOSPC);
      done += static_cast<size_t>(n);
      bytes_ += static_cast<uint64_t>(n);
    }
    p += slice;
    bytes -= slice;
  }
}

FileRecord AtomicWriter::finish() {
  if (direct_) {
    if (const int err = direct_->finish()) fail("write", err);
    direct_.reset();
  }
  // A taken-over file may have been longer: its tail is not this file's.
  if (reused_ && ::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) fail("truncate", errno);
  // fsync before rename: otherwise a crash can leave the final name pointing at unwritten blocks
  // (with O_DIRECT too: the file's size and extents, and the device's write cache).
  if (::fsync(fd_) != 0) fail("fsync", errno);
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    discard();
    throw CheckpointError(rank_, "could not close " + tmp_path_ + ": " + describe(err));
  }
  fd_ = -1;
  // renameat() replaces `name` itself, also when it is a link: nothing is written through one.
  const std::string final_path = dir_ + "/" + name_;
  if (::renameat(dir_fd_, tmp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
    discard();
    throw CheckpointError(rank_, "could not rename " + tmp_path_ + " to " + final_path + ": " + describe(err));
  }
  discard();
  return {name_, bytes_, hasher_.digest()};
}

void fsync_dir(const std::string& dir, int rank) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw CheckpointError(rank, "could not open directory " + dir + ": " + describe(err));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(rank, "could not fsync directory " + dir + ": " + describe(err));
}

int open_checkpoint_file(const std::string& path, int rank, uint64_t* bytes) {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (fstat below refuses it); reads of a
  // regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) throw CheckpointError(rank, path + " is a symbolic link; a checkpoint holds regular files only");
    throw CheckpointError(rank, "could not open " + path + ": " + describe(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CheckpointError(rank, path + " is not a regular file (a FIFO, device or directory); a checkpoint holds "
                                "regular files only");
  }
  *bytes = static_cast<uint64_t>(st.st_size);
  return fd;
}

size_t read_at_most(int fd, char* out, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

std::string read_small_file(const std::string& path, uint64_t max_bytes, int rank) {
  uint64_t bytes = 0;
  const int fd = open_checkpoint_file(path, rank, &bytes);
  if (bytes > max_bytes) {
    ::close(fd);
    throw CheckpointError(rank, path + " has " + std::to_string(bytes) + " bytes, more than the " +
                                    std::to_string(max_bytes) + " such a file may have");
  }
  std::string text(static_cast<size_t>(bytes), '\0');
  text.resize(read_at_most(fd, text.data(), text.size(), 0));  // shrank while read: the parser checks it
  ::close(fd);
  return text;
}

namespace {

// Reads a whole file through `sink(data, n)`; returns its size.
template <typename Sink>
uint64_t stream_file(const std::string& path, int rank, Sink&& sink) {
  uint64_t size = 0;
  const int fd = open_checkpoint_file(path, rank, &size);
  uint64_t total = 0;
  for (;;) {
    char* buf = sink.buffer(kHashChunk);
    const ssize_t n = ::read(fd, buf, kHashChunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw CheckpointError(rank, "could not read " + path + ": " + describe(err));
    }
    if (n == 0) break;
    sink.consumed(buf, static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total;
}

}  // namespace

FileRecord hash_file(const std::string& dir, const std::string& name, int rank) {
  struct Sink {
    std::unique_ptr<char[]> buf{new char[kHashChunk]};
    Hasher hasher;
    char* buffer(size_t) { return buf.get(); }
    void consumed(const char* p, size_t n) { hasher.update(p, n); }
  } sink;
  const uint64_t bytes = stream_file(dir + "/" + name, rank, sink);
  return {name, bytes, sink.hasher.digest()};
}

bool is_temporary_name(const std::string& name) { return name.find(".tmp-") != std::string::npos; }

}  // namespace cohort::ckpt
