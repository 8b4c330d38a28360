#include "checkpoint/storage/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "checkpoint/format/safetensors.h"
#include "cohort/error.h"

namespace cohort::ckpt {
namespace {

// The names in the directory open as `dir_fd` (which stays open: the listing reads a duplicate).
std::vector<std::string> entries_at(int dir_fd) {
  std::vector<std::string> names;
  const int fd = ::dup(dir_fd);
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  ::rewinddir(d);  // the duplicate shares the offset
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

std::vector<std::string> entries_of(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return {};
  auto names = entries_at(fd);
  ::close(fd);
  return names;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string real_directory_problem(const std::string& given) {
  std::string path = given;  // "link/" would resolve the link: the name itself is asked about
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "missing" : std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return {};
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    const std::string to = n > 0 ? " to " + std::string(target, static_cast<size_t>(n)) : std::string();
    return "a symbolic link" + to +
           " (cohort follows no link inside a checkpoint directory: remove the link, or move the checkpoint itself here)";
  }
  return "not a directory";
}

std::optional<Manifest> read_manifest(const std::string& path, std::string* problem) {
  // The directory first: through a link, the manifest (and every file it lists) would be another
  // directory's, outside the one the user named.
  if (std::string why = real_directory_problem(path); !why.empty()) {
    *problem = why;
    return std::nullopt;
  }
  const std::string file = path + "/" + kManifestName;
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    *problem = std::string("no ") + kManifestName + " (an interrupted or unfinished save)";
    return std::nullopt;
  }
  try {
    return Manifest::parse(read_small_file(file, kMaxManifestBytes, -1));
  } catch (const Error& e) {  // not a regular file, or too large
    *problem = e.what();
    return std::nullopt;
  } catch (const std::exception& e) {
    *problem = std::string(kManifestName) + " " + e.what();
    return std::nullopt;
  }
}

std::vector<ListedCheckpoint> list_checkpoints(const std::string& dir, bool read_manifests) {
  std::vector<ListedCheckpoint> out;
  for (const auto& name : entries_of(dir)) {
    const int64_t step = step_from_dir_name(name);
    const std::string path = dir + "/" + name;
    if (step < 0) continue;
    ListedCheckpoint c;
    c.path = path;
    c.step = step;
    c.problem = real_directory_problem(path);
    if (c.problem == "missing") continue;  // removed since the listing
    if (!c.problem.empty()) {  // never looked into: neither its manifest nor its files are this folder's
      c.foreign = true;
      out.push_back(std::move(c));
      continue;
    }
    if (!read_manifests) {
      if (::access((path + "/" + kManifestName).c_str(), F_OK) == 0) c.manifest = Manifest{};
      out.push_back(std::move(c));
      continue;
    }
    c.manifest = read_manifest(path, &c.problem);
    if (c.manifest && c.manifest->step != step) {
      c.problem = std::string(kManifestName) + " says step " + std::to_string(c.manifest->step) +
                  " but the directory is " + name;
      c.manifest.reset();
    }
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

std::string check_file_contents(const ManifestFile& expected, const char* data, uint64_t bytes, uint64_t xxh3) {
  if (bytes != expected.bytes)
    return expected.name + ": has " + std::to_string(bytes) + " bytes, the manifest lists " +
           std::to_string(expected.bytes) + (bytes < expected.bytes ? " (truncated)" : "");
  if (xxh3 != expected.xxh3)
    return expected.name + ": checksum mismatch (manifest " + to_hex(expected.xxh3) + ", file " + to_hex(xxh3) +
           "): the file is corrupt";
  if (ends_with(expected.name, ".safetensors")) {
    try {
      const std::string first(data, std::min<uint64_t>(bytes, 8));
      const uint64_t need = std::min<uint64_t>(needed_prefix(first), bytes);
      parse_header(std::string(data, need), bytes);
    } catch (const std::exception& e) {
      return expected.name + ": " + e.what();
    }
  }
  return {};
}

std::string verify_checkpoint(const std::string& path, bool per_rank_files) {
  std::string problem;
  auto manifest = read_manifest(path, &problem);
  if (!manifest) return problem;
  for (const auto& f : manifest->files) {
    if (!per_rank_files && f.role != "model" && f.role != "optimizer") continue;
    const std::string file = path + "/" + f.name;
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0) return f.name + ": missing";
    if (!S_ISREG(st.st_mode)) return f.name + ": not a regular file (a checkpoint holds regular files only)";
    if (static_cast<uint64_t>(st.st_size) != f.bytes)
      return f.name + ": has " + std::to_string(st.st_size) + " bytes, the manifest lists " + std::to_string(f.bytes) +
             (static_cast<uint64_t>(st.st_size) < f.bytes ? " (truncated)" : "");
    try {
      const FileRecord actual = hash_file(path, f.name, -1);
      if (actual.xxh3 != f.xxh3)
        return f.name + ": checksum mismatch (manifest " + to_hex(f.xxh3) + ", file " + to_hex(actual.xxh3) +
               "): the file is corrupt";
      if (ends_with(f.name, ".safetensors")) read_header(file);
    } catch (const std::exception& e) {
      return f.name + ": " + e.what();
    }
  }
  return {};
}

bool remove_checkpoint(const std::string& path, const std::map<std::string, std::string>& keep) {
  // Everything through a descriptor of the directory itself: a `path` that is a symbolic link is not
  // opened (O_NOFOLLOW), so nothing in its target is removed, even if it became one since listed;
  // unlinkat() of a link inside removes the link, not its target.
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return false;
  bool clean = true;
  if (::unlinkat(dir_fd, kManifestName, 0) == 0) clean &= ::fsync(dir_fd) == 0;
  for (const auto& name : entries_at(dir_fd)) {
    const auto to = keep.find(name);
    const bool kept =
        to != keep.end() && ::renameat(dir_fd, name.c_str(), AT_FDCWD, (to->second + "/" + name).c_str()) == 0;
    clean &= kept || ::unlinkat(dir_fd, name.c_str(), 0) == 0;
  }
  ::close(dir_fd);
  clean &= ::rmdir(path.c_str()) == 0;  // a link put there meanwhile: ENOTDIR, nothing removed
  return clean;
}

void remove_temporaries(const std::string& path, const std::vector<std::string>& names) {
  const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);  // as remove_checkpoint
  if (dir_fd < 0) return;
  for (const auto& entry : entries_at(dir_fd))
    for (const auto& name : names)
      if (!name.empty() && entry.compare(0, name.size() + 5, name + ".tmp-") == 0) ::unlinkat(dir_fd, entry.c_str(), 0);
  ::close(dir_fd);
}

std::vector<std::string> retired_checkpoints(const std::vector<ListedCheckpoint>& listed, int keep_last,
                                             int64_t keep_every_steps) {
  std::vector<std::string> out;
  int64_t newest_committed = -1;
  int kept = 0;
  for (const auto& c : listed) {  // newest first
    if (c.foreign) continue;  // a link or a file: cohort made neither, so it is not cohort's to remove
    if (!c.manifest) {
      // Older than a committed one: an interrupted save nobody will finish. Newer ones may be a save
      // in flight (of this job or another writer), so they stay.
      if (newest_committed >= 0 && c.step < newest_committed) out.push_back(c.path);
      continue;
    }
    if (newest_committed < 0) newest_committed = c.step;
    const bool permanent = keep_every_steps > 0 && c.step % keep_every_steps == 0;
    if (kept < keep_last) {
      ++kept;
    } else if (!permanent) {
      out.push_back(c.path);
    }
  }
  return out;
}

}  // namespace cohort::ckpt
