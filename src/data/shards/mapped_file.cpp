// Read-only mappings of shard files, and small files (manifests, indexes) read whole. See mapped_file.h.
#include "data/shards/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::data {
namespace {

// Opens a regular file without blocking on a FIFO; -1 with `problem` set otherwise.
int open_regular(const std::string& path, uint64_t& bytes, std::string& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file";
    ::close(fd);
    return -1;
  }
  bytes = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, uint64_t expected_bytes, const std::string& label) {
  uint64_t bytes = 0;
  std::string problem;
  const int fd = open_regular(path, bytes, problem);
  if (fd < 0) throw ConfigError(-1, label + ": " + problem);
  if (bytes != expected_bytes) {
    ::close(fd);
    throw ConfigError(-1, label + ": " + (bytes < expected_bytes ? "truncated: " : "longer than the manifest says: ") +
                              std::to_string(bytes) + " bytes, the manifest says " + std::to_string(expected_bytes) +
                              " (prepare the data set again)");
  }
  if (bytes > 0) {
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw ConfigError(-1, label + ": mmap failed: " + std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  size_ = bytes;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

uint64_t MappedFile::xxh3() const {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  constexpr uint64_t kPiece = 64ull << 20;
  for (uint64_t off = 0; off < size_; off += kPiece) {
    const uint64_t n = size_ - off < kPiece ? size_ - off : kPiece;
    XXH3_64bits_update(state, data_ + off, n);
    // Verifying a data set larger than memory should not evict the training's working set.
    ::madvise(const_cast<uint8_t*>(data_ + off), n, MADV_DONTNEED);
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

bool read_small_file(const std::string& path, uint64_t max_bytes, std::string& text, std::string& problem) {
  uint64_t bytes = 0;
  const int fd = open_regular(path, bytes, problem);
  if (fd < 0) return false;
  if (bytes > max_bytes) {
    ::close(fd);
    problem = std::to_string(bytes) + " bytes, more than the " + std::to_string(max_bytes) + " it may have";
    return false;
  }
  ::fcntl(fd, F_SETFL, 0);  // blocking reads from here on (a regular file)
  text.assign(bytes, '\0');
  uint64_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd, &text[got], bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      problem = n == 0 ? "shorter than its size (changed while read)" : std::strerror(errno);
      ::close(fd);
      return false;
    }
    got += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return true;
}

}  // namespace cohort::data
