#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>  // XXH3_64bits streaming

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "cohort/error.h"

namespace cohort::ckpt {
namespace {

std::atomic<uint64_t> g_tmp_counter{0};
constexpr size_t kHashChunk = 4u << 20;  // hash and write in slices that stay in cache

std::string describe(int err) { return std::strerror(err); }

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

AtomicWriter::AtomicWriter(const std::string& dir, const std::string& name, int rank)
    : dir_(dir), name_(name), rank_(rank) {
  tmp_path_ = dir + "/" + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(g_tmp_counter++);
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw CheckpointError(rank_, "could not create " + tmp_path_ + ": " + describe(err));
  }
}

AtomicWriter::~AtomicWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicWriter::fail(const std::string& what, int err) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  throw CheckpointError(rank_, "could not " + what + " " + dir_ + "/" + name_ + ": " + describe(err) +
                                   " (after " + std::to_string(bytes_) + " bytes; nothing was committed)");
}

void AtomicWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t slice = bytes < kHashChunk ? bytes : kHashChunk;
    hasher_.update(p, slice);
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
  // fsync before rename: otherwise a crash can leave the final name pointing at unwritten blocks.
  if (::fsync(fd_) != 0) fail("fsync", errno);
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    ::unlink(tmp_path_.c_str());
    throw CheckpointError(rank_, "could not close " + tmp_path_ + ": " + describe(err));
  }
  fd_ = -1;
  const std::string final_path = dir_ + "/" + name_;
  if (::rename(tmp_path_.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    throw CheckpointError(rank_, "could not rename " + tmp_path_ + " to " + final_path + ": " + describe(err));
  }
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

namespace {

// Reads a whole file through `sink(data, n)`; returns its size.
template <typename Sink>
uint64_t stream_file(const std::string& path, int rank, Sink&& sink) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw CheckpointError(rank, "could not open " + path + ": " + describe(err));
  }
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

FileContents read_file(const std::string& path, int rank) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw CheckpointError(rank, "could not open " + path + ": " + describe(err));
  }
  // One buffer of the size stat reports, plus a chunk of slack so that a file that grew meanwhile
  // is noticed (its size then differs from the manifest's) instead of overflowing.
  FileContents out;
  const uint64_t capacity = static_cast<uint64_t>(st.st_size) + kHashChunk;
  out.data.reset(new char[capacity]);
  struct Sink {
    char* base;
    uint64_t capacity;
    uint64_t used = 0;
    Hasher hasher;
    std::string path;
    char* buffer(size_t want) {
      if (used + want > capacity) throw std::length_error(path + " grew while being read");
      return base + used;
    }
    void consumed(const char* p, size_t n) {
      hasher.update(p, n);
      used += n;
    }
  } sink{out.data.get(), capacity, 0, {}, path};
  try {
    out.bytes = stream_file(path, rank, sink);
  } catch (const std::length_error& e) {
    throw CheckpointError(rank, e.what());
  }
  out.xxh3 = sink.hasher.digest();
  return out;
}

bool is_temporary_name(const std::string& name) { return name.find(".tmp-") != std::string::npos; }

}  // namespace cohort::ckpt
