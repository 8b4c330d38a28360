// A prepared data set opened for reading: mapped shards, checked indexes. See shard_set.h.
#include "data/shards/shard_set.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cohort/error.h"

namespace cohort::data {
namespace {

uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian files on little-endian hosts (x86-64, aarch64)
  return v;
}

}  // namespace

void check_document_index(const uint8_t* offsets, uint64_t documents, uint64_t tokens, const std::string& label) {
  uint64_t prev = 0;
  for (uint64_t d = 0; d <= documents; ++d) {
    const uint64_t off = load_le64(offsets + d * 8);
    if (off > tokens) {
      throw ConfigError(-1, label + ": document " + std::to_string(d) + " starts at token " + std::to_string(off) +
                                ", past the shard's end (" + std::to_string(tokens) + " tokens)");
    }
    if (off < prev || (d == 0 && off != 0)) {
      throw ConfigError(-1, label + ": offset " + std::to_string(d) + " (" + std::to_string(off) +
                                ") is out of order (offsets start at 0 and never decrease)");
    }
    prev = off;
  }
  if (prev != tokens) {
    throw ConfigError(-1, label + ": the last offset is " + std::to_string(prev) + ", not the shard's end (" +
                              std::to_string(tokens) + " tokens)");
  }
}

ShardSet::ShardSet(const std::string& dir, uint64_t window, bool verify_checksums, const RemoteOptions& remote)
    : dir_(dir), window_(window) {
  if (is_url(dir)) {
    remote_ = std::make_unique<RemoteShards>(dir, remote);
    manifest_ = remote_->manifest();
  } else {
    manifest_ = read_manifest(dir);
  }
  if (manifest_.tokens() && window < 2) throw ConfigError(-1, dir + ": token samples need a window of 2 tokens or more");
  starts_.push_back(0);
  for (size_t k = 0; k < manifest_.shards.size(); ++k) {
    const ShardEntry& s = manifest_.shards[k];
    if (!remote_) shards_.emplace_back(dir + "/" + s.data.file, s.data.bytes, dir + "/" + s.data.file);
    uint64_t n = s.items;
    if (manifest_.tokens()) {
      const std::string label = remote_ ? remote_->url() + s.index.file : dir + "/" + s.index.file;
      if (remote_) {
        indexes_.push_back(remote_->index(k));
      } else {
        indexes_.emplace_back(dir + "/" + s.index.file, s.index.bytes, label);
      }
      const MappedFile& index = indexes_.back();
      check_document_index(index.data(), s.documents, s.items, label);
      ::madvise(const_cast<uint8_t*>(index.data()), index.size(), MADV_DONTNEED);  // read again when asked for
      n = s.items >= window ? (s.items - 1) / (window - 1) : 0;
    }
    starts_.push_back(starts_.back() + n);
  }
  if (verify_checksums && !remote_) verify();
}

size_t ShardSet::shard_of(uint64_t i) const {
  if (i >= samples()) throw std::out_of_range("sample " + std::to_string(i) + " of " + std::to_string(samples()));
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin() - 1);
}

std::pair<size_t, uint64_t> ShardSet::locate(uint64_t i) const {
  const size_t s = shard_of(i);
  const uint64_t step = manifest_.tokens() ? (window_ - 1) * manifest_.item_bytes : manifest_.item_bytes;
  return {s, (i - starts_[s]) * step};
}

ShardPin ShardSet::shard(size_t s) const {
  if (remote_) return remote_->pin(s);
  return ShardPin(&shards_[s], nullptr, s);
}

void ShardSet::prefetch_shard(size_t s, const std::vector<size_t>& keep) const {
  if (remote_) remote_->prefetch(s, keep);
}

void ShardSet::read_tokens(uint64_t i, int64_t* out) const {
  if (i >= samples()) throw std::out_of_range("token sample " + std::to_string(i) + " of " + std::to_string(samples()));
  const auto [s, offset] = locate(i);
  const uint64_t bytes = manifest_.item_bytes;
  // Copied out of the mapping first (guarded against a truncated shard), then widened.
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(window_ * bytes);
  {
    const ShardPin pin = shard(s);  // a remote shard stays mapped while it is copied
    pin.file().copy(offset, buffer.data(), buffer.size());
  }
  const uint8_t* p = buffer.data();
  if (bytes == 2) {
    for (uint64_t t = 0; t < window_; ++t) {
      uint16_t v;
      std::memcpy(&v, p + t * 2, 2);
      out[t] = v;
    }
  } else {
    for (uint64_t t = 0; t < window_; ++t) {
      uint32_t v;
      std::memcpy(&v, p + t * 4, 4);
      out[t] = v;
    }
  }
}

std::pair<const uint8_t*, uint64_t> ShardSet::sample_bytes(uint64_t i) const {
  if (remote_) throw std::logic_error("ShardSet::sample_bytes on a remote data set (" + dir_ + ")");
  const auto [s, offset] = locate(i);
  return {shards_[s].data() + offset, manifest_.tokens() ? window_ * manifest_.item_bytes : manifest_.item_bytes};
}

const uint8_t* ShardSet::record(uint64_t i) const {
  if (remote_) throw std::logic_error("ShardSet::record on a remote data set (" + dir_ + "): read_record");
  if (i >= samples()) throw std::out_of_range("record " + std::to_string(i) + " of " + std::to_string(samples()));
  const auto [s, offset] = locate(i);
  return shards_[s].data() + offset;
}

void ShardSet::read_record(uint64_t i, uint8_t* out) const {
  if (i >= samples()) throw std::out_of_range("record " + std::to_string(i) + " of " + std::to_string(samples()));
  const auto [s, offset] = locate(i);
  const ShardPin pin = shard(s);
  pin.file().copy(offset, out, manifest_.item_bytes);
}

void ShardSet::check_files() const {
  if (remote_) return;  // the cache's copies come and go; each is checked against the manifest before use
  for (size_t s = 0; s < shards_.size(); ++s) {
    std::string problem = shards_[s].changed();
    if (!problem.empty()) throw ConfigError(-1, dir_ + "/" + manifest_.shards[s].data.file + ": " + problem);
    if (s < indexes_.size() && !(problem = indexes_[s].changed()).empty()) {
      throw ConfigError(-1, dir_ + "/" + manifest_.shards[s].index.file + ": " + problem);
    }
  }
}

const uint64_t* ShardSet::document_offsets(size_t s) const {
  if (!manifest_.tokens() || s >= indexes_.size()) return nullptr;
  return reinterpret_cast<const uint64_t*>(indexes_[s].data());
}

void ShardSet::release_samples(std::vector<uint64_t> samples) const {
  // A fault maps more than the page it needs: up to 64 KiB around it (fault-around), and the whole
  // of a large folio of the page cache (up to a 2 MiB PMD). So the release covers the 2 MiB-aligned
  // chunks a sample lies in. A remote shard is released only while mapped here (and pinned).
  constexpr uint64_t kChunk = 2ull << 20;
  const uint64_t sample_size = manifest_.tokens() ? window_ * manifest_.item_bytes : manifest_.item_bytes;
  std::sort(samples.begin(), samples.end());
  size_t shard = 0;
  uint64_t from = 0, to = 0;  // the range being merged, as offsets in `shard`
  auto flush = [&] {
    if (to <= from) return;
    const ShardPin pin = remote_ ? remote_->pin_if_mapped(shard) : ShardPin(&shards_[shard], nullptr, shard);
    if (pin) ::madvise(const_cast<uint8_t*>(pin.data() + from), to - from, MADV_DONTNEED);
  };
  for (uint64_t i : samples) {
    const auto [s, offset] = locate(i);
    const uint64_t size = manifest_.shards[s].data.bytes;
    const uint64_t lo = offset & ~(kChunk - 1);
    const uint64_t hi = std::min<uint64_t>((offset + sample_size + kChunk - 1) & ~(kChunk - 1), size);
    if (s == shard && lo <= to) {
      to = std::max(to, hi);
      continue;
    }
    flush();
    shard = s, from = lo, to = hi;
  }
  flush();
}

void ShardSet::verify() const {
  auto check = [&](const MappedFile& f, const FileEntry& e) {
    const uint64_t got = f.xxh3();
    if (got != e.xxh3) {
      throw ConfigError(-1, dir_ + "/" + e.file + ": checksum mismatch: XXH3 " + hex64(got) + ", the manifest says " +
                                hex64(e.xxh3) + " (the file changed or is corrupt; prepare the data set again)");
    }
  };
  if (remote_) {  // each shard is checked against the manifest as it is fetched or found in the cache
    for (size_t s = 0; s < manifest_.shards.size(); ++s) (void)remote_->pin(s);
    return;
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    check(shards_[s], manifest_.shards[s].data);
    if (manifest_.tokens()) check(indexes_[s], manifest_.shards[s].index);
  }
}

}  // namespace cohort::data
