// A remote data set through a local cache. See remote_shards.h.
#include "data/remote/remote_shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "cohort/error.h"

namespace cohort::data {

// Every RemoteShards of the process: an eviction asks them all, so that two of them on one cache
// folder (ranks as threads, a blend) never delete what the other has pinned.
struct RemoteRegistry {
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<RemoteShards*>& all() {
    static std::vector<RemoteShards*> v;
    return v;
  }
};

namespace {

constexpr uint64_t kMaxManifestBytes = 64ull << 20;

std::string with_slash(const std::string& url) { return url.empty() || url.back() == '/' ? url : url + "/"; }

}  // namespace

ShardPin::~ShardPin() {
  if (owner_) owner_->unpin(shard_);
}

RemoteShards::RemoteShards(const std::string& url, const RemoteOptions& options)
    : url_(with_slash(url)), options_(options) {
  if (options.cache_dir.empty()) {
    throw ConfigError(-1, url_ + ": a remote data set is read through a cache folder: set ShardedDatasetOptions::cache_dir");
  }
  std::string text;
  try {
    HttpClient client(options.http);
    text = client.get(url_ + "manifest.json", kMaxManifestBytes);
  } catch (const HttpError& e) {
    throw CommError(options.rank, std::string("remote data set: ") + e.what());
  }
  try {
    manifest_ = Manifest::parse(text);
  } catch (const std::exception& e) {
    throw ConfigError(-1, url_ + "manifest.json: " + e.what());
  }
  uint64_t largest = 0, indexes = 0;
  std::string largest_file;
  for (const auto& s : manifest_.shards) {
    if (s.data.bytes > largest) largest = s.data.bytes, largest_file = s.data.file;
    indexes += s.index.bytes;
  }
  if (options.cache_bytes > 0 && options.cache_bytes < largest + indexes) {
    throw ConfigError(-1, url_ + ": the cache limit (" + std::to_string(options.cache_bytes) + " bytes) is below one shard: " +
                              largest_file + " is " + std::to_string(largest) + " bytes" +
                              (indexes ? " and the indexes " + std::to_string(indexes) + " more" : "") +
                              "; set cache_bytes to " + std::to_string(largest + indexes) + " or more");
  }
  cache_ = std::make_unique<CacheDir>(options.cache_dir, url_, options.cache_bytes);
  slots_.resize(manifest_.shards.size());
  std::lock_guard<std::mutex> lock(RemoteRegistry::mutex());
  RemoteRegistry::all().push_back(this);
}

RemoteShards::~RemoteShards() {
  std::lock_guard<std::mutex> lock(RemoteRegistry::mutex());
  auto& all = RemoteRegistry::all();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

uint64_t RemoteShards::fetched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fetched_;
}

void RemoteShards::fail(size_t s, const std::string& problem) const {
  throw CommError(options_.rank, "shard " + std::to_string(s) + " of " + url_ + ": " + problem);
}

MappedFile RemoteShards::index(size_t s) {
  const FileEntry& e = manifest_.shards.at(s).index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    index_paths_.push_back(cache_->path(e.file));
  }
  bool no_room = false;
  try {
    return fetch_file(e, nullptr, &no_room);
  } catch (const std::exception& ex) {
    throw CommError(options_.rank, "the index of shard " + std::to_string(s) + " of " + url_ + ": " + ex.what());
  }
}

ShardPin RemoteShards::pin(size_t s) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    Slot& slot = slots_.at(s);
    if (slot.state == State::kMapped) {
      // Another process may have evicted the copy: the mapping stays readable, but its disk space
      // is freed only when it is dropped. Looked at once a second, when no reader holds it.
      const auto now = std::chrono::steady_clock::now();
      if (slot.pins == 0 && now - slot.checked > std::chrono::seconds(1)) {
        slot.checked = now;
        struct stat st {};
        if (::stat(cache_->path(manifest_.shards[s].data.file).c_str(), &st) != 0 || st.st_ino != slot.inode) {
          slot.map = MappedFile();
          slot.state = State::kAbsent;
          continue;
        }
      }
      ++slot.pins;
      return ShardPin(&slot.map, this, s);
    }
    if (slot.state == State::kFetching) {  // a prefetch (or another reader) is on it
      changed_.wait(lock, [&] { return slot.state != State::kFetching; });
      if (slot.state == State::kAbsent && !slot.error.empty()) fail(s, slot.error);
      continue;
    }
    lock.unlock();
    fetch(s, nullptr);
    lock.lock();
  }
}

ShardPin RemoteShards::pin_if_mapped(size_t s) {
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& slot = slots_.at(s);
  if (slot.state != State::kMapped) return ShardPin();
  ++slot.pins;
  return ShardPin(&slot.map, this, s);
}

void RemoteShards::unpin(size_t s) {
  std::lock_guard<std::mutex> lock(mutex_);
  --slots_[s].pins;
}

void RemoteShards::prefetch(size_t s, const std::vector<size_t>& keep) noexcept {
  try {
    fetch(s, &keep);
  } catch (...) {  // kept in the slot for pin()
  }
}

bool RemoteShards::fetch(size_t s, const std::vector<size_t>* keep) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& slot = slots_.at(s);
    if (slot.state != State::kAbsent) return true;
    slot.state = State::kFetching;
    slot.error.clear();
  }
  bool no_room = false;
  MappedFile m;
  try {
    m = fetch_file(manifest_.shards[s].data, keep, &no_room);
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slots_[s].state = State::kAbsent;
      slots_[s].error = e.what();
    }
    changed_.notify_all();
    fail(s, e.what());
  }
  struct stat st {};
  ::stat(cache_->path(manifest_.shards[s].data.file).c_str(), &st);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& slot = slots_[s];
    if (no_room) {
      slot.state = State::kAbsent;
    } else {
      slot.map = std::move(m);
      slot.inode = st.st_ino;
      slot.checked = std::chrono::steady_clock::now();
      slot.state = State::kMapped;
    }
  }
  changed_.notify_all();
  return !no_room;
}

bool RemoteShards::release_for_eviction(const std::string& path, const std::vector<size_t>* keep) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(index_paths_.begin(), index_paths_.end(), path) != index_paths_.end()) return false;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (cache_->path(manifest_.shards[s].data.file) != path) continue;
    Slot& slot = slots_[s];
    if (slot.pins > 0 || slot.state == State::kFetching) return false;
    if (keep && std::find(keep->begin(), keep->end(), s) != keep->end()) return false;
    return true;
  }
  return true;
}

MappedFile RemoteShards::fetch_file(const FileEntry& e, const std::vector<size_t>* keep, bool* no_room) {
  const std::string path = cache_->path(e.file);
  const FileLock file_lock = cache_->lock(e.file);  // one fetch of a file at a time, across processes
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {  // a copy from an earlier run or another rank: checked first
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == e.bytes) {
      try {
        MappedFile m(path, e.bytes, path);
        if (m.xxh3() == e.xxh3) {
          CacheDir::touch(path);
          return m;
        }
      } catch (const ConfigError&) {  // evicted meanwhile
      }
    }
    ::unlink(path.c_str());  // corrupt, truncated or from another version of the data set: fetched again
  }
  auto may_evict = [&](const std::string& victim) {
    std::lock_guard<std::mutex> lock(RemoteRegistry::mutex());
    for (RemoteShards* r : RemoteRegistry::all()) {
      if (!r->release_for_eviction(victim, r == this ? keep : nullptr)) return false;
    }
    for (RemoteShards* r : RemoteRegistry::all()) {  // every reader agrees: their mappings go
      std::lock_guard<std::mutex> lock2(r->mutex_);
      for (size_t s = 0; s < r->slots_.size(); ++s) {
        if (r->cache_->path(r->manifest_.shards[s].data.file) == victim && r->slots_[s].state == State::kMapped) {
          r->slots_[s].map = MappedFile();
          r->slots_[s].state = State::kAbsent;
        }
      }
    }
    return true;
  };
  const auto start = std::chrono::steady_clock::now();
  std::string part;
  for (;;) {
    part = cache_->reserve(e.file, e.bytes, may_evict);
    if (!part.empty()) break;
    if (keep) {  // a prefetch does not take room the reader needs
      *no_room = true;
      return MappedFile();
    }
    // What is in the way is pinned or being fetched, here or by another rank: both end soon.
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > options_.http.timeout_s * std::max(1, options_.http.tries)) {
      throw ConfigError(-1, "the cache " + cache_->root() + " has no room for " + e.file + " (" + std::to_string(e.bytes) +
                                " bytes) within its limit of " + std::to_string(cache_->limit()) +
                                " bytes: what it holds is in use; raise cache_bytes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int fd = ::open(part.c_str(), O_WRONLY | O_CLOEXEC);
  try {
    if (fd < 0) throw ConfigError(-1, part + ": cannot open: " + std::strerror(errno));
    std::unique_ptr<HttpClient> client = take_client();
    client->get_range(url_ + e.file, 0, e.bytes, [&](uint64_t pos, const char* data, size_t n) {
      while (n > 0) {
        const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(pos));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw std::runtime_error(part + ": cannot write: " + std::strerror(errno));
        data += w, n -= static_cast<size_t>(w), pos += static_cast<uint64_t>(w);
      }
    });
    return_client(std::move(client));
    ::close(fd);
    fd = -1;
    MappedFile m(part, e.bytes, url_ + e.file);
    const uint64_t got = m.xxh3();
    if (got != e.xxh3) {
      throw HttpError(url_ + e.file + ": the server's copy has XXH3 " + hex64(got) + ", the manifest says " + hex64(e.xxh3) +
                      " (the file changed on the server or is corrupt there)");
    }
    cache_->commit(part, e.file);
    std::lock_guard<std::mutex> lock(mutex_);
    ++fetched_;
    return m;
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(part.c_str());
    throw;
  }
}

std::unique_ptr<HttpClient> RemoteShards::take_client() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!clients_.empty()) {
      auto c = std::move(clients_.back());
      clients_.pop_back();
      return c;
    }
  }
  return std::make_unique<HttpClient>(options_.http);
}

void RemoteShards::return_client(std::unique_ptr<HttpClient> c) {
  std::lock_guard<std::mutex> lock(mutex_);
  clients_.push_back(std::move(c));
}

}  // namespace cohort::data
