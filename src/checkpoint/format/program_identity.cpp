#include "checkpoint/format/program_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "checkpoint/storage/file_io.h"
#include "cohort/error.h"

namespace cohort::ckpt {

namespace {

// XXH3-64 of /proc/self/exe as "exe-xxh3:<16 hex>", or "" when it cannot be read.
std::string executable_hash() {
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  Hasher hasher;
  std::vector<char> buffer(1 << 20);
  bool ok = true;
  for (;;) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    hasher.update(buffer.data(), static_cast<size_t>(n));
  }
  close(fd);
  return ok ? "exe-xxh3:" + to_hex(hasher.digest()) : "";
}

}  // namespace

std::string program_identity(int rank) {
  if (const char* label = std::getenv("COHORT_PROGRAM_VERSION"); label && *label) {
    const std::string text(label);
    if (text.size() > 200)
      throw ConfigError(rank, "COHORT_PROGRAM_VERSION is " + std::to_string(text.size()) +
                                  " characters long; at most 200 (a version label, such as a git commit)");
    return text;
  }
  static std::once_flag once;
  static std::string hash;
  std::call_once(once, [] { hash = executable_hash(); });
  return hash;
}

}  // namespace cohort::ckpt
