// A shard changed under a running job (issue 46): truncated — its mapped pages past the new end
// raise SIGBUS — is one error naming the shard and the rank, from the trainer's read, with the
// prefetcher reading ahead over the same pages; deleted — still readable through the mapping for
// the rest of the epoch — stops the next epoch by name, as opening the data set again does;
// replaced by another file of the same name, the same. Ranks are explicit, no process group.
#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "cohort/sharded_dataset.h"
#include "data/prepare/shard_writer.h"
#include "support/files.h"

namespace cohort {
namespace {

// 4 shards of ~64 KiB of uint16 tokens (32768 tokens each): pages past a truncated end exist.
void write_changing_data(const std::string& dir) {
  data::Manifest base;
  base.kind = "tokens";
  base.item_bytes = 2;
  base.vocab_size = 60000;
  base.tokenizer.kind = "bytes";
  base.tokenizer.xxh3 = 7;
  data::ShardWriter w(dir, base, 64 * 1024);
  uint32_t x = 99;
  for (int d = 0; d < 64; ++d) {
    std::vector<uint32_t> doc(2048);
    for (auto& t : doc) t = (x = x * 1103515245u + 12345u) % 60000;
    w.add_tokens(doc.data(), doc.size());
    w.end_document();
  }
  w.finish();
}

ShardedDatasetOptions unshuffled() {
  ShardedDatasetOptions o;
  o.seq_len = 63;  // 128-byte samples: 512 a shard
  o.global_batch = 16;
  o.shuffle = false;  // shard by shard, so the test knows when shard 1 is read
  o.prefetch_batches = 4;
  return o;
}

std::string shard_path(const std::string& dir, int s) {
  char name[32];
  std::snprintf(name, sizeof(name), "/shard-%05d.bin", s);
  return dir + name;
}

TEST(ShardChanges, ATruncatedShardIsOneErrorNamingTheShardAndTheRankNotSIGBUS) {
  cohort::testing::TempDir tmp("cohort_shard_truncate");
  const std::string dir = tmp.path();
  write_changing_data(dir);
  ShardedDataset data(dir, /*rank=*/1, /*world_size=*/2, unshuffled());
  ASSERT_TRUE(data.get_batch(8).has_value());  // shard 0, mapped and read
  // Cut shard 1 to 1000 bytes: its pages past the first are no longer backed by the file.
  ASSERT_EQ(::truncate(shard_path(dir, 1).c_str(), 1000), 0);
  std::string error;
  int batches = 1;
  try {
    while (data.get_batch(8)) ++batches;  // the prefetcher reads shard 1 ahead of the trainer too
  } catch (const ConfigError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "rank 1: " + shard_path(dir, 1) + ": truncated while the job read it: 1000 bytes now, 65536 when opened "
                   "(the file changed under the job: put back the one it started with, or start again on the new data)");
  // Shard 0's 512 samples are 32 global batches; the error comes at shard 1's first unbacked page.
  EXPECT_GE(batches, 32);
  EXPECT_LT(batches, 64);
}

TEST(ShardChanges, ADeletedShardIsReadUntilTheEpochEndsAndTheNextEpochNamesIt) {
  cohort::testing::TempDir tmp("cohort_shard_delete");
  const std::string dir = tmp.path();
  write_changing_data(dir);
  ShardedDataset data(dir, 0, 1, unshuffled());
  ShardedDataset reference(dir, 0, 1, unshuffled());
  data.reset();
  reference.reset();
  ASSERT_TRUE(data.get_batch(16).has_value());
  ASSERT_TRUE(reference.get_batch(16).has_value());
  ASSERT_EQ(::unlink(shard_path(dir, 2).c_str()), 0);
  // The mapping holds the deleted file: the epoch goes on, with the same samples.
  int64_t batches = 1;
  while (auto batch = data.get_batch(16)) {
    auto expected = reference.get_batch(16);
    ASSERT_TRUE(expected.has_value());
    ASSERT_TRUE(torch::equal(batch->data, expected->data)) << "batch " << batches;
    ++batches;
  }
  EXPECT_EQ(batches, data.steps_per_epoch());
  const std::string message = "rank 0: " + shard_path(dir, 2) + ": deleted while the job read it (the file changed under the job: "
                              "put back the one it started with, or start again on the new data)";
  try {
    data.reset();  // the next epoch
    ADD_FAILURE() << "the next epoch started without shard 2";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
  // Opening the data set again (a restart) names it too.
  try {
    ShardedDataset again(dir, 0, 1, unshuffled());
    ADD_FAILURE() << "opened without shard 2";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(shard_path(dir, 2)), std::string::npos) << e.what();
  }
}

TEST(ShardChanges, AShardReplacedUnderTheSameNameStopsTheNextEpoch) {
  cohort::testing::TempDir tmp("cohort_shard_replace");
  const std::string dir = tmp.path();
  write_changing_data(dir);
  ShardedDataset data(dir, 0, 1, unshuffled());
  std::filesystem::copy_file(shard_path(dir, 0), dir + "/copy");
  std::filesystem::rename(dir + "/copy", shard_path(dir, 0));  // the same bytes, another file
  try {
    data.reset();
    ADD_FAILURE() << "a replaced shard went unnoticed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0: " + shard_path(dir, 0) + ": replaced by another file while the job read it (the "
                                     "file changed under the job: put back the one it started with, or start again on the new data)");
  }
}

}  // namespace
}  // namespace cohort
