// bench/data/bench_token_set.h — what the data benches share (data_read, data_http, data_peers):
// a generated token data set and dropping a file's pages from the page cache (cold reads).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/prepare/shard_writer.h"
#include "data/shards/manifest.h"

namespace bench_data {

// Random uint16 tokens below GPT-2's vocabulary (50257), in documents of 1000 tokens, until
// `bytes`, in shards of `shard_bytes`: no tokenizer to train, the same set for the same seed.
inline void generate_token_set(const std::string& dir, uint64_t bytes, uint64_t shard_bytes, uint32_t seed) {
  cohort::data::Manifest base;
  base.kind = "tokens";
  base.item_bytes = 2;
  base.vocab_size = 50257;
  base.tokenizer.kind = "bytes";
  base.tokenizer.xxh3 = 1;
  std::filesystem::create_directories(dir);
  cohort::data::ShardWriter w(dir, base, shard_bytes);
  std::mt19937 rng(seed);
  std::vector<uint32_t> doc(1000);
  for (uint64_t written = 0; written < bytes; written += doc.size() * 2) {
    for (auto& t : doc) t = rng() % 50257;
    w.add_tokens(doc.data(), doc.size());
    w.end_document();
  }
  w.finish();
}

// Drops `path`'s pages from the page cache (written back first), so that the next read is cold.
inline void evict_from_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace bench_data
