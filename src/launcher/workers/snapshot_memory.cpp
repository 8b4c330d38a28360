// The job's snapshot directory in memory. See snapshot_memory.h.
#include "launcher/workers/snapshot_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace cohort::launcher {
namespace {

constexpr const char* kBase = "/dev/shm";
constexpr const char* kPrefix = "cohort-snapshots-";

// Directories of agents that died without cleaning up: their lock can be taken.
void remove_abandoned() {
  DIR* d = ::opendir(kBase);
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string dir = std::string(kBase) + "/" + name;
    const int lock = ::open((dir + "/agent.lock").c_str(), O_RDONLY | O_CLOEXEC);
    if (lock < 0) continue;  // another user's (unreadable), or not one of ours
    if (::flock(lock, LOCK_EX | LOCK_NB) == 0) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    ::close(lock);
  }
  ::closedir(d);
}

}  // namespace

SnapshotMemory::SnapshotMemory() {
  if (const char* own = std::getenv("COHORT_SNAPSHOT_DIR"); own && *own) return;
  remove_abandoned();
  std::string templ = std::string(kBase) + "/" + kPrefix + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {  // mode 0700
    std::cerr << "cohort run: warning: no in-memory snapshots: cannot create " << templ << ": " << std::strerror(errno)
              << std::endl;
    return;
  }
  lock_fd_ = ::open((templ + "/agent.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ >= 0) ::flock(lock_fd_, LOCK_EX);
  dir_ = templ;
}

SnapshotMemory::~SnapshotMemory() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);  // the lock file with it; then the lock goes
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::vector<std::string> SnapshotMemory::worker_variables() const {
  if (dir_.empty()) return {};
  return {"COHORT_SNAPSHOT_DIR=" + dir_};
}

}  // namespace cohort::launcher
