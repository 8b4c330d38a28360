// The shard format (src/data/shards/): written by ShardWriter, read back through memory maps, and
// every kind of bad data set refused with one line naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cohort/error.h"
#include "data/shards/shard_set.h"
#include "data/prepare/shard_writer.h"
#include "support/files.h"

namespace cohort::data {
namespace {

using cohort::testing::TempDir;
namespace fs = std::filesystem;

Manifest token_base(uint64_t item_bytes = 2) {
  Manifest m;
  m.kind = "tokens";
  m.item_bytes = item_bytes;
  m.vocab_size = item_bytes == 2 ? 1000 : 100000;
  m.tokenizer.kind = "bytes";
  m.tokenizer.xxh3 = 77;
  return m;
}

// Documents of 1..50 tokens, token t of document d = (d * 31 + t) % vocab; shards of 64 tokens.
std::vector<uint32_t> write_tokens(const std::string& dir, uint64_t item_bytes = 2, int documents = 40) {
  ShardWriter w(dir, token_base(item_bytes), 64 * item_bytes);
  std::vector<uint32_t> all;
  for (int d = 0; d < documents; ++d) {
    std::vector<uint32_t> doc;
    for (int t = 0; t < 1 + d % 50; ++t) doc.push_back(static_cast<uint32_t>((d * 31 + t) % (item_bytes == 2 ? 1000 : 100000)));
    w.add_tokens(doc.data(), doc.size());
    w.end_document();
    all.insert(all.end(), doc.begin(), doc.end());
  }
  w.finish();
  return all;
}

std::string error_of(const std::string& dir, uint64_t window, bool verify) {
  try {
    ShardSet set(dir, window, verify);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(Shards, TokensRoundTripAcrossShardsWithTheirDocumentIndex) {
  for (uint64_t item_bytes : {2, 4}) {
    TempDir dir("cohort_shards");
    const std::vector<uint32_t> all = write_tokens(dir.path(), item_bytes);
    const ShardSet set(dir.path(), 9, /*verify_checksums=*/true);
    const Manifest& m = set.manifest();
    EXPECT_EQ(m.items(), all.size());
    EXPECT_EQ(m.shards.size(), (all.size() + 63) / 64);
    EXPECT_EQ(std::string(token_dtype(m.item_bytes)), item_bytes == 2 ? "uint16" : "uint32");
    // Windows of 9 tokens every 8, inside each shard.
    uint64_t sample = 0, shard_start = 0;
    for (size_t s = 0; s < m.shards.size(); ++s) {
      const uint64_t tokens = m.shards[s].items;
      for (uint64_t w = 0; tokens >= 9 && w < (tokens - 1) / 8; ++w, ++sample) {
        int64_t out[9];
        set.read_tokens(sample, out);
        for (int t = 0; t < 9; ++t) ASSERT_EQ(out[t], all[shard_start + w * 8 + t]) << "sample " << sample;
      }
      // The index: starts of documents (or of a document's continuation), then the shard's end.
      const uint64_t* offsets = set.document_offsets(s);
      EXPECT_EQ(offsets[0], 0u);
      EXPECT_EQ(offsets[m.shards[s].documents], tokens);
      shard_start += tokens;
    }
    EXPECT_EQ(sample, set.samples());
    // Every document boundary of the stream is in some shard's index.
    EXPECT_GE(m.documents(), 40u);
  }
}

TEST(Shards, RecordsRoundTrip) {
  TempDir dir("cohort_records");
  Manifest base;
  base.kind = "records";
  base.item_bytes = 5;
  std::vector<uint8_t> bytes(5 * 23);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  {
    ShardWriter w(dir.path(), base, 24);  // 4 records per shard
    w.add_records(bytes.data(), 23);
    EXPECT_EQ(w.finish().shards.size(), 6u);
  }
  const ShardSet set(dir.path(), 0, true);
  ASSERT_EQ(set.samples(), 23u);
  for (uint64_t i = 0; i < 23; ++i) ASSERT_EQ(std::memcmp(set.record(i), &bytes[i * 5], 5), 0) << "record " << i;
}

TEST(Shards, AWrongChecksumNamesTheShard) {
  TempDir dir("cohort_shards");
  write_tokens(dir.path());
  flip_byte(dir.path() + "/shard-00001.bin", 3);
  EXPECT_EQ(error_of(dir.path(), 9, false), "(no error)");  // sizes still match: only hashing sees it
  const std::string e = error_of(dir.path(), 9, true);
  EXPECT_NE(e.find(dir.path() + "/shard-00001.bin: checksum mismatch: XXH3 "), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Shards, ATruncatedOrMissingShardNamesIt) {
  TempDir dir("cohort_shards");
  write_tokens(dir.path());
  fs::resize_file(dir.path() + "/shard-00002.bin", 100);
  std::string e = error_of(dir.path(), 9, false);
  EXPECT_NE(e.find(dir.path() + "/shard-00002.bin: truncated: 100 bytes, the manifest says 128"), std::string::npos) << e;
  fs::remove(dir.path() + "/shard-00002.bin");
  e = error_of(dir.path(), 9, false);
  EXPECT_NE(e.find(dir.path() + "/shard-00002.bin: No such file or directory"), std::string::npos) << e;
}

TEST(Shards, AnIndexThatPointsPastTheEndNamesIt) {
  TempDir dir("cohort_shards");
  write_tokens(dir.path());
  {  // the second offset of shard 0 (a document start) far past the shard's 64 tokens
    std::fstream f(dir.path() + "/shard-00000.idx", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    const uint64_t past = 1000000;
    f.write(reinterpret_cast<const char*>(&past), 8);
  }
  const std::string e = error_of(dir.path(), 9, false);
  EXPECT_NE(e.find(dir.path() + "/shard-00000.idx: document 1 starts at token 1000000, past the shard's end (64 tokens)"),
            std::string::npos)
      << e;
}

TEST(Shards, AManifestThatDoesNotParseNamesIt) {
  TempDir dir("cohort_shards");
  write_tokens(dir.path());
  const std::string path = dir.path() + "/manifest.json";
  const std::string good = cohort::testing::slurp(path);
  auto with = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
    return error_of(dir.path(), 9, false);
  };
  EXPECT_NE(with("{\"format\": ").find(path + ": is not JSON"), std::string::npos);
  EXPECT_NE(with(std::string(100000, '[')).find(path + ": is nested deeper than 64 levels"), std::string::npos);
  std::string escaping = good;
  escaping.replace(escaping.find("shard-00000.bin"), 15, "../../etc/passwd");
  EXPECT_NE(with(escaping).find("not a plain file name in the directory"), std::string::npos) << with(escaping);
  std::string wrong_size = good;
  wrong_size.replace(wrong_size.find("\"bytes\": 128"), 12, "\"bytes\": 127");
  EXPECT_NE(with(wrong_size).find("has 127 bytes for 64 items of 2 bytes"), std::string::npos) << with(wrong_size);
  fs::remove(path);
  EXPECT_NE(error_of(dir.path(), 9, false).find(path + ": No such file or directory"), std::string::npos);
}

TEST(Shards, AFailedWriteLeavesNoShardBehind) {
  TempDir dir("cohort_shards");
  {
    ShardWriter w(dir.path(), token_base(), 16);
    const std::vector<uint32_t> tokens(100, 5);
    w.add_tokens(tokens.data(), tokens.size());
    // destroyed without finish(): an error midway
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
  ShardWriter empty(dir.path(), token_base(), 16);
  EXPECT_THROW(empty.finish(), std::runtime_error);
}

}  // namespace
}  // namespace cohort::data
