// Read-only mappings of shard files. See mapped_file.h.
#include "data/shards/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "cohort/data_file.h"
#include "cohort/error.h"
#include "data/shards/guarded_read.h"

namespace cohort::data {

MappedFile::MappedFile(const std::string& path, uint64_t expected_bytes, const std::string& label)
    : path_(path), label_(label) {
  const DataFile file = open_data_file(path, {UINT64_MAX, ""});  // no cap: the file is mapped, not read
  if (file.fd < 0) throw ConfigError(-1, label + ": " + file.problem);
  const int fd = file.fd;
  const uint64_t bytes = file.bytes;
  struct stat st;
  if (::fstat(fd, &st) == 0) device_ = static_cast<uint64_t>(st.st_dev), inode_ = static_cast<uint64_t>(st.st_ino);
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

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)), label_(std::move(other.label_)),
      device_(other.device_), inode_(other.inode_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    label_ = std::move(other.label_);
    device_ = other.device_;
    inode_ = other.inode_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::copy(uint64_t offset, void* out, size_t n) const {
  if (offset > size_ || n > size_ - offset) {
    throw ConfigError(-1, label_ + ": a read of " + std::to_string(n) + " bytes at " + std::to_string(offset) +
                              " is past the end (" + std::to_string(size_) + " bytes)");
  }
  if (guarded_copy(out, data_ + offset, n)) return;
  std::string now = changed();
  if (now.empty()) now = "its pages past byte " + std::to_string(offset) + " are gone (SIGBUS: truncated and written again?)";
  throw ConfigError(-1, label_ + ": " + now);
}

std::string MappedFile::changed() const {
  const std::string what = " (the file changed under the job: put back the one it started with, or start again on the new data)";
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    return errno == ENOENT ? "deleted while the job read it" + what : std::string("cannot be checked: ") + std::strerror(errno);
  }
  if (static_cast<uint64_t>(st.st_dev) != device_ || static_cast<uint64_t>(st.st_ino) != inode_) {
    return "replaced by another file while the job read it" + what;
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (bytes != size_) {
    return std::string(bytes < size_ ? "truncated" : "grown") + " while the job read it: " + std::to_string(bytes) +
           " bytes now, " + std::to_string(size_) + " when opened" + what;
  }
  return "";
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
