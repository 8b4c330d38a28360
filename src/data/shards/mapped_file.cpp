// Read-only mappings of shard files. See mapped_file.h.
#include "data/shards/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "cohort/data_file.h"
#include "cohort/error.h"

namespace cohort::data {

MappedFile::MappedFile(const std::string& path, uint64_t expected_bytes, const std::string& label) {
  const DataFile file = open_data_file(path, {UINT64_MAX, ""});  // no cap: the file is mapped, not read
  if (file.fd < 0) throw ConfigError(-1, label + ": " + file.problem);
  const int fd = file.fd;
  const uint64_t bytes = file.bytes;
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

}  // namespace cohort::data
