// The cache folder of remote shards. See cache_dir.h.
#include "data/remote/cache_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cohort/error.h"
#include "data/shards/manifest.h"

namespace cohort::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMarker = ".cohort-remote";
constexpr const char* kPart = ".part-";

struct Copy {
  std::string path;
  uint64_t bytes = 0;
  struct timespec mtime {};
};

// A temporary file NAME.part-PID-N whose process is gone.
bool stale_part(const std::string& file) {
  const size_t at = file.rfind(kPart);
  if (at == std::string::npos) return false;
  const long pid = std::strtol(file.c_str() + at + std::strlen(kPart), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Every copy and reservation in the cache's marked folders (deleting stale temporary files).
std::vector<Copy> scan(const std::string& root, uint64_t* total) {
  std::vector<Copy> copies;
  *total = 0;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator(root, ec)) {
    if (!dir.is_directory(ec) || !fs::exists(dir.path() / kMarker, ec)) continue;  // not ours: never touched
    for (const auto& f : fs::directory_iterator(dir.path(), ec)) {
      const std::string name = f.path().filename().string();
      if (name == kMarker || (name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0)) continue;
      struct stat st {};
      if (::lstat(f.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.find(kPart) != std::string::npos) {
        if (stale_part(name)) {
          ::unlink(f.path().c_str());
          continue;
        }
        *total += static_cast<uint64_t>(st.st_size);  // a live reservation: counted, not evicted
        continue;
      }
      *total += static_cast<uint64_t>(st.st_size);
      copies.push_back({f.path().string(), static_cast<uint64_t>(st.st_size), st.st_mtim});
    }
  }
  return copies;
}

}  // namespace

FileLock::FileLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw ConfigError(-1, path + ": cannot open the cache's lock file: " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

CacheDir::CacheDir(const std::string& root, const std::string& url, uint64_t limit)
    : root_(root), folder_(root + "/" + hex64(xxh3_64(url.data(), url.size()))), limit_(limit) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec || !fs::is_directory(folder_)) {
    throw ConfigError(-1, folder_ + ": cannot make the cache folder: " + (ec ? ec.message() : "not a directory"));
  }
  const std::string marker = folder_ + "/" + kMarker;
  if (!fs::exists(marker)) {
    std::ofstream(marker) << url << "\n";
  }
}

FileLock CacheDir::lock(const std::string& name) const { return FileLock(path(name) + ".lock"); }

std::string CacheDir::reserve(const std::string& name, uint64_t bytes,
                              const std::function<bool(const std::string&)>& may_evict) {
  static std::atomic<uint64_t> serial{0};
  FileLock cache_lock(root_ + "/.lock");
  uint64_t total = 0;
  std::vector<Copy> copies = scan(root_, &total);
  if (limit_ > 0 && total + bytes > limit_) {
    std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) {
      return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    for (const Copy& c : copies) {
      if (total + bytes <= limit_) break;
      if (!may_evict(c.path)) continue;
      if (::unlink(c.path.c_str()) == 0 || errno == ENOENT) total -= std::min(total, c.bytes);
    }
    if (total + bytes > limit_) return "";
  }
  const std::string part = path(name) + kPart + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw ConfigError(-1, part + ": cannot create: " + std::strerror(errno));
  const int rc = ::ftruncate(fd, static_cast<off_t>(bytes));
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    ::unlink(part.c_str());
    throw ConfigError(-1, part + ": cannot size to " + std::to_string(bytes) + " bytes: " + std::strerror(err));
  }
  return part;
}

void CacheDir::commit(const std::string& part, const std::string& name) const {
  // Under the cache's lock: a scan that ran beside the rename could see the file under neither name.
  const FileLock cache_lock(root_ + "/.lock");
  if (::rename(part.c_str(), path(name).c_str()) != 0) {
    const int err = errno;
    ::unlink(part.c_str());
    throw ConfigError(-1, path(name) + ": cannot rename the fetched copy into place: " + std::strerror(err));
  }
  touch(path(name));
}

void CacheDir::touch(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

uint64_t CacheDir::used() const {
  FileLock cache_lock(root_ + "/.lock");
  uint64_t total = 0;
  scan(root_, &total);
  return total;
}

}  // namespace cohort::data
