// Writing shards, indexes and the manifest. See shard_writer.h.
#include "data/prepare/shard_writer.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace cohort::data {
namespace {

std::string shard_name(size_t i, const char* ext) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05zu.%s", i, ext);
  return name;
}

void write_file(const std::string& path, const void* data, uint64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error(path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error(path + ": write failed: " + std::strerror(ok ? errno : err));
}

}  // namespace

ShardWriter::ShardWriter(std::string dir, Manifest base, uint64_t shard_bytes)
    : dir_(std::move(dir)), manifest_(std::move(base)) {
  manifest_.shards.clear();
  max_items_ = shard_bytes / manifest_.item_bytes;
  if (max_items_ == 0) max_items_ = 1;
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
  if (hash_) XXH3_freeState(hash_);
  if (!finished_) {
    for (const auto& f : written_) ::unlink((dir_ + "/" + f).c_str());
  }
}

void ShardWriter::open_shard() {
  const std::string name = shard_name(manifest_.shards.size(), "bin");
  written_.push_back(name);
  file_ = std::fopen((dir_ + "/" + name).c_str(), "wb");
  if (!file_) throw std::runtime_error(dir_ + "/" + name + ": " + std::strerror(errno));
  if (!hash_) hash_ = XXH3_createState();
  XXH3_64bits_reset(hash_);
  items_ = 0;
  offsets_.assign(1, 0);
  ShardEntry s;
  s.data.file = name;
  manifest_.shards.push_back(s);
}

void ShardWriter::write(const void* p, uint64_t bytes) {
  if (std::fwrite(p, 1, bytes, file_) != bytes) {
    throw std::runtime_error(dir_ + "/" + manifest_.shards.back().data.file + ": write failed: " + std::strerror(errno));
  }
  XXH3_64bits_update(hash_, p, bytes);
}

void ShardWriter::close_shard() {
  ShardEntry& s = manifest_.shards.back();
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) throw std::runtime_error(dir_ + "/" + s.data.file + ": write failed: " + std::strerror(errno));
  s.items = items_;
  s.data.bytes = items_ * manifest_.item_bytes;
  s.data.xxh3 = XXH3_64bits_digest(hash_);
  if (manifest_.tokens()) {
    if (offsets_.back() != items_) offsets_.push_back(items_);  // a document that goes on in the next shard
    s.documents = offsets_.size() - 1;
    s.index.file = shard_name(manifest_.shards.size() - 1, "idx");
    s.index.bytes = offsets_.size() * 8;
    s.index.xxh3 = xxh3_64(offsets_.data(), s.index.bytes);
    written_.push_back(s.index.file);
    write_file(dir_ + "/" + s.index.file, offsets_.data(), s.index.bytes);
  }
}

void ShardWriter::add_tokens(const uint32_t* tokens, uint64_t n) {
  while (n > 0) {
    if (!file_) open_shard();
    const uint64_t take = std::min(n, max_items_ - items_);
    if (manifest_.item_bytes == 2) {
      buffer_.resize(take * 2);
      for (uint64_t i = 0; i < take; ++i) {
        const uint16_t v = static_cast<uint16_t>(tokens[i]);
        std::memcpy(&buffer_[i * 2], &v, 2);
      }
      write(buffer_.data(), take * 2);
    } else {
      write(tokens, take * 4);
    }
    items_ += take;
    tokens += take;
    n -= take;
    if (items_ == max_items_) close_shard();
  }
}

void ShardWriter::end_document() {
  if (file_ && offsets_.back() != items_) offsets_.push_back(items_);
}

void ShardWriter::add_records(const uint8_t* records, uint64_t n) {
  while (n > 0) {
    if (!file_) open_shard();
    const uint64_t take = std::min(n, max_items_ - items_);
    write(records, take * manifest_.item_bytes);
    items_ += take;
    records += take * manifest_.item_bytes;
    n -= take;
    if (items_ == max_items_) close_shard();
  }
}

Manifest ShardWriter::finish() {
  if (file_) close_shard();
  if (manifest_.shards.empty()) throw std::runtime_error("nothing to write: the inputs hold no " + manifest_.kind);
  const std::string text = manifest_.to_json();
  const std::string tmp = dir_ + "/.manifest.json.tmp";
  written_.push_back(".manifest.json.tmp");
  write_file(tmp, text.data(), text.size());
  if (std::rename(tmp.c_str(), (dir_ + "/manifest.json").c_str()) != 0) {
    throw std::runtime_error(dir_ + "/manifest.json: " + std::strerror(errno));
  }
  finished_ = true;
  return manifest_;
}

}  // namespace cohort::data
