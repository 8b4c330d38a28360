// Data files: regular files only, opened without blocking, with a size cap. See cohort/data_file.h.
#include "cohort/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cohort {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

std::string byte_size_text(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char text[32];
  // Whole numbers without a fraction ("1 GiB"); others with one decimal, rounded down so that a
  // file just over a cap never reads as the cap ("1.0 GiB, more than the 1 GiB").
  if (v == static_cast<double>(static_cast<uint64_t>(v)))
    std::snprintf(text, sizeof(text), "%.0f %s", v, units[u]);
  else
    std::snprintf(text, sizeof(text), "%.1f %s", std::max(0.1, static_cast<double>(static_cast<uint64_t>(v * 10)) / 10), units[u]);
  return text;
}

DataFile open_data_file(const std::string& path, const DataFileLimit& limit) {
  DataFile f;
  // O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer; fstat then
  // refuses it. Regular files ignore the flag, and it is cleared below all the same.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    f.problem = std::strerror(errno);
    return f;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    f.problem = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    f.problem = "not a regular file (" + kind_of(st.st_mode) + ")";
  } else if (static_cast<uint64_t>(st.st_size) > limit.max_bytes) {
    f.problem = byte_size_text(static_cast<uint64_t>(st.st_size)) + ", more than the " + byte_size_text(limit.max_bytes) +
                " " + limit.what_for;
  } else {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    f.fd = fd;
    f.bytes = static_cast<uint64_t>(st.st_size);
    return f;
  }
  ::close(fd);
  return f;
}

bool read_data_file(const std::string& path, const DataFileLimit& limit, std::string& text, std::string& problem) {
  DataFile f = open_data_file(path, limit);
  if (f.fd < 0) {
    problem = f.problem;
    return false;
  }
  // The size fstat gave, plus one byte to notice a file that grew meanwhile: what is read never
  // exceeds what was checked against the cap, however the file changes.
  text.assign(static_cast<size_t>(f.bytes) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = std::strerror(errno);
      ::close(f.fd);
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(f.fd);
  if (got > f.bytes) {
    problem = "grew while it was read (still being written?)";
    return false;
  }
  text.resize(got);
  return true;
}

}  // namespace cohort
