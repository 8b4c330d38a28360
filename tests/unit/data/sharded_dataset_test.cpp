// ShardedDataset (include/cohort/sharded_dataset.h): the same global batches at every world size,
// and after any resume — {same world size, 2→1, 1→2, 2→4} × {mid-epoch, epoch boundary, second
// resume} — the hash of every global batch equals the uninterrupted run's. Ranks are simulated in
// one process: one dataset per rank, stepped in lockstep.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cohort/error.h"
#include "cohort/sharded_dataset.h"
#include "data/prefetcher.h"
#include "data/shards/shard_set.h"
#include "data/prepare/shard_writer.h"
#include "support/files.h"
#include "support/thread_ranks.h"

namespace cohort {
namespace {

using cohort::testing::TempDir;

constexpr int64_t kSeqLen = 7, kGlobalBatch = 8;

// 3 shards of token documents (~600 samples of 8 tokens); the tokenizer hash is `tokenizer`.
void write_data(const std::string& dir, uint64_t tokenizer = 1, uint32_t salt = 0) {
  data::Manifest base;
  base.kind = "tokens";
  base.item_bytes = 2;
  base.vocab_size = 50000;
  base.tokenizer.kind = "bytes";
  base.tokenizer.xxh3 = tokenizer;
  data::ShardWriter w(dir, base, 3000);
  uint32_t x = 12345 + salt;
  for (int d = 0; d < 300; ++d) {
    std::vector<uint32_t> doc(1 + d % 29);
    for (auto& t : doc) t = (x = x * 1103515245u + 12345u) % 50000;
    w.add_tokens(doc.data(), doc.size());
    w.end_document();
  }
  w.finish();
}

ShardedDatasetOptions options() {
  ShardedDatasetOptions o;
  o.seq_len = kSeqLen;
  o.global_batch = kGlobalBatch;
  o.seed = 17;
  o.block = 16;  // small blocks and windows, so the shuffle's every part is exercised
  o.window_blocks = 3;
  return o;
}

// A job of `world` ranks over `dir`, stepped in lockstep; each step's global batch is assembled
// by position (rank r's j-th sample is position j·W + r of the batch) and hashed.
struct Job {
  std::vector<ShardedDataset> ranks;
  Job(const std::string& dir, int world) {
    for (int r = 0; r < world; ++r) ranks.emplace_back(dir, r, world, options());
  }
  Job(const std::vector<BlendSource>& blend, int world) {
    for (int r = 0; r < world; ++r) ranks.emplace_back(blend, r, world, options());
  }
  // The next global batch's hash, or nullopt at the epoch's end (then every rank's reset()).
  std::optional<int64_t> step() {
    const int64_t world = static_cast<int64_t>(ranks.size());
    torch::Tensor batch = torch::empty({kGlobalBatch, kSeqLen + 1}, torch::kInt64);
    for (int64_t r = 0; r < world; ++r) {
      auto b = ranks[r].get_batch(static_cast<size_t>(ranks[r].local_batch()));
      if (!b) {
        EXPECT_EQ(r, 0) << "ranks disagree about the epoch's end";
        for (auto& d : ranks) d.reset();
        return std::nullopt;
      }
      for (int64_t j = 0; j < ranks[r].local_batch(); ++j) {
        batch[j * world + r].narrow(0, 0, kSeqLen).copy_(b->data[j]);
        batch[j * world + r][kSeqLen].copy_(b->target[j][kSeqLen - 1]);
      }
    }
    // A hash of the batch's tokens in position order.
    int64_t h = 1469598103934665603LL;
    for (int64_t i = 0; i < batch.numel(); ++i) h = (h ^ batch.data_ptr<int64_t>()[i]) * 1099511628211LL;
    return h;
  }
  // `n` global batches (crossing epoch ends), as hashes; an epoch's end is recorded as 0.
  std::vector<int64_t> run(int n) {
    std::vector<int64_t> out;
    while (static_cast<int>(out.size()) < n) out.push_back(step().value_or(0));
    return out;
  }
  std::string state() const { return ranks[0].state_dict(); }  // rank 0's, as the Checkpointer saves it
  void load(const std::string& s) {
    for (auto& d : ranks) d.load_state_dict(s);
  }
};

class ShardedDatasetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("cohort_dataset");
    write_data(dir_->path());
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* ShardedDatasetTest::dir_ = nullptr;

TEST_F(ShardedDatasetTest, EveryWorldSizeThatDividesTheGlobalBatchSeesTheSameBatches) {
  Job one(dir_->path(), 1);
  const int steps = static_cast<int>(one.ranks[0].steps_per_epoch());
  ASSERT_GT(steps, 50);
  const std::vector<int64_t> reference = one.run(2 * steps + 5);  // into the third epoch
  for (int world : {2, 4, 8}) EXPECT_EQ(Job(dir_->path(), world).run(2 * steps + 5), reference) << "world " << world;
  // Epochs differ from each other (a fresh permutation each epoch).
  EXPECT_NE(std::vector<int64_t>(reference.begin(), reference.begin() + 10),
            std::vector<int64_t>(reference.begin() + steps + 1, reference.begin() + steps + 11));
}

TEST_F(ShardedDatasetTest, ResumeMatrixGivesTheUninterruptedRunsBatches) {
  const int steps = static_cast<int>(Job(dir_->path(), 1).ranks[0].steps_per_epoch());
  const int total = 3 * (steps + 1);  // three epochs, with their end markers
  const std::vector<int64_t> reference = Job(dir_->path(), 1).run(total);
  struct Case {
    int from, to;
  };
  for (Case c : {Case{2, 2}, Case{2, 1}, Case{1, 2}, Case{2, 4}}) {
    // Where the first save happens: mid-epoch, and exactly at the epoch's end (after its last batch).
    for (int saved_at : {steps / 3, steps}) {
      SCOPED_TRACE("world " + std::to_string(c.from) + " -> " + std::to_string(c.to) + ", saved after " +
                   std::to_string(saved_at) + " of " + std::to_string(steps) + " steps");
      Job first(dir_->path(), c.from);
      std::vector<int64_t> got = first.run(saved_at);
      const std::string state = first.state();
      EXPECT_LT(state.size(), 1024u) << state;
      Job second(dir_->path(), c.to);  // a restart: fresh datasets, the state from the checkpoint
      second.load(state);
      const int until = saved_at + steps / 2 + 3;
      for (int64_t h : second.run(until - saved_at)) got.push_back(h);
      // A second resume, back at the first world size, from the resumed run's state.
      Job third(dir_->path(), c.from);
      third.load(second.state());
      for (int64_t h : third.run(total - until)) got.push_back(h);
      // At the boundary the save comes before the loader noticed the end: the resumed run sees
      // the end (nullopt) first, as the uninterrupted one does.
      EXPECT_EQ(got, reference);
    }
  }
}

TEST_F(ShardedDatasetTest, WorksWithTorchsStatefulLoaderAndItsEpochs) {
  ShardedDataset data(dir_->path(), 1, 2, options());
  ShardedDataset mine = data;  // a handle: this copy sees the loader's position
  auto loader = torch::data::make_data_loader(data, torch::data::DataLoaderOptions(static_cast<size_t>(data.local_batch())));
  int64_t batches = 0;
  for (auto& batch : *loader) {
    ASSERT_EQ(batch.data.sizes(), (std::vector<int64_t>{kGlobalBatch / 2, kSeqLen}));
    EXPECT_TRUE(torch::equal(batch.data.narrow(1, 1, kSeqLen - 1), batch.target.narrow(1, 0, kSeqLen - 1)));
    ++batches;
  }
  EXPECT_EQ(batches, mine.steps_per_epoch());
  EXPECT_EQ(mine.epoch(), 0);
  EXPECT_EQ(ShardedDatasetState::from_json(mine.state_dict()).position, mine.steps_per_epoch() * kGlobalBatch);
  for (auto& batch : *loader) {  // the next pass: the next epoch
    EXPECT_EQ(mine.epoch(), 1);
    (void)batch;
    break;
  }
}

// Through the Checkpointer (a cohort::Stateful under a name): saved by 2 ranks after 5 steps,
// restored by 4, whose next batches are those of a 4-rank run that never stopped.
TEST_F(ShardedDatasetTest, ItsPositionGoesIntoCheckpointsAndRestoresAtAnotherWorldSize) {
  TempDir checkpoints("cohort_dataset_ckpt");
  cohort::testing::run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    ShardedDataset data(dir_->path(), ctx, options());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(data.get_batch(static_cast<size_t>(data.local_batch())));
    torch::nn::Linear model(2, 2);
    Checkpointer(checkpoints.path(), ctx).save(TrainingState{model.get(), nullptr, nullptr, {{"data", &data}}});
  });
  cohort::testing::run_ranks(4, [&](std::shared_ptr<Context> ctx) {
    ShardedDataset data(dir_->path(), ctx, options());
    torch::nn::Linear model(2, 2);
    ASSERT_TRUE(Checkpointer(checkpoints.path(), ctx).restore_latest(TrainingState{model.get(), nullptr, nullptr, {{"data", &data}}}));
    ShardedDataset uninterrupted(dir_->path(), ctx->rank(), 4, options());
    for (int i = 0; i < 5; ++i) uninterrupted.get_batch(static_cast<size_t>(uninterrupted.local_batch()));
    for (int i = 0; i < 3; ++i) {
      auto got = data.get_batch(static_cast<size_t>(data.local_batch()));
      auto want = uninterrupted.get_batch(static_cast<size_t>(uninterrupted.local_batch()));
      ASSERT_TRUE(got && want);
      EXPECT_TRUE(torch::equal(got->data, want->data)) << "rank " << ctx->rank() << ", step " << 5 + i;
    }
  });
}

TEST_F(ShardedDatasetTest, AChangedDataSetOrTokenizerAtResumeNamesWhatDiffers) {
  const std::string state = Job(dir_->path(), 1).state();
  TempDir other("cohort_dataset");
  write_data(other.path() + "", 1, /*salt=*/5);
  auto error_of = [&](const std::string& dir) {
    try {
      ShardedDataset(dir, 0, 1, options()).load_state_dict(state);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string e = error_of(other.path());
  EXPECT_NE(e.find("rank 0: ShardedDataset: the data set differs from the checkpoint's: fingerprint "), std::string::npos) << e;
  TempDir retokenized("cohort_dataset");
  write_data(retokenized.path(), /*tokenizer=*/2);
  e = error_of(retokenized.path());
  EXPECT_NE(e.find("the tokenizer differs from the checkpoint's"), std::string::npos) << e;
  ShardedDatasetOptions longer = options();
  longer.seq_len = kSeqLen + 1;
  try {
    ShardedDataset(dir_->path(), 0, 1, longer).load_state_dict(state);
    ADD_FAILURE() << "a changed sequence length was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the sequence length differs"), std::string::npos) << e.what();
  }
}

TEST_F(ShardedDatasetTest, RefusesAGlobalBatchTheWorldSizeDoesNotDivide) {
  ShardedDatasetOptions o = options();
  o.global_batch = 6;
  try {
    ShardedDataset(dir_->path(), 1, 4, o);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "rank 1: ShardedDataset: the global batch (6) must be a positive multiple of the world size (4)");
  }
  EXPECT_THROW(ShardedDataset(dir_->path(), 0, 1, o).get_batch(5), ConfigError);
}

TEST_F(ShardedDatasetTest, ABlendDrawsByItsWeightsAndResumesAtAnotherWorldSize) {
  TempDir code("cohort_dataset");
  write_data(code.path(), 1, /*salt=*/9);
  const std::vector<BlendSource> blend{{dir_->path(), 7}, {code.path(), 3}};
  Job one(blend, 1);
  const ShardedDataset& d = one.ranks[0];
  EXPECT_EQ(d.samples(), 2 * Job(dir_->path(), 1).ranks[0].samples());  // the two data sets' samples together
  // 70:30 within one sample over every prefix of the first epoch.
  uint64_t from_code = 0;
  for (uint64_t k = 0; k < d.samples(); ++k) {
    from_code += d.source_at(0, k);
    ASSERT_LT(std::fabs(static_cast<double>(from_code) - 0.3 * static_cast<double>(k + 1)), 1.0) << k;
  }
  // The same global batches at world size 4, and after a resume from 4 to 2 mid-epoch.
  const int steps = static_cast<int>(d.steps_per_epoch());
  const std::vector<int64_t> reference = one.run(2 * steps);
  EXPECT_EQ(Job(blend, 4).run(2 * steps), reference);
  Job four(blend, 4);
  std::vector<int64_t> got = four.run(steps / 2);
  Job two(blend, 2);
  two.load(four.state());
  for (int64_t h : two.run(2 * steps - steps / 2)) got.push_back(h);
  EXPECT_EQ(got, reference);
  // Other weights are another blend: named at resume.
  try {
    Job(std::vector<BlendSource>{{dir_->path(), 1}, {code.path(), 1}}, 1).load(four.state());
    ADD_FAILURE() << "a blend with other weights was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the blend (its data sets or weights) differs"), std::string::npos) << e.what();
  }
}

TEST_F(ShardedDatasetTest, ABlendOfDataSetsWithDifferentTokenizersIsRefused) {
  TempDir other("cohort_dataset");
  write_data(other.path(), /*tokenizer=*/2);
  try {
    ShardedDataset(std::vector<BlendSource>{{dir_->path(), 1}, {other.path(), 1}}, 0, 1, options());
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a blend of data sets with different tokenizers: " + dir_->path()), std::string::npos)
        << e.what();
  }
}

// The read-ahead thread brings evicted pages of a shard back into memory. Where the file system
// cannot evict (tmpfs), there is nothing to show: skipped.
TEST(ShardedDatasetPrefetch, ReadsRequestedRangesIntoThePageCache) {
  TempDir dir("cohort_dataset");
  data::Manifest base;
  base.kind = "records";
  base.item_bytes = 4096;
  {
    data::ShardWriter w(dir.path(), base, 64ull << 20);
    const std::vector<uint8_t> recs(4096 * 2048, 7);  // 8 MiB
    w.add_records(recs.data(), 2048);
    w.finish();
  }
  const std::string shard = dir.path() + "/shard-00000.bin";
  const int fd = ::open(shard.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  const data::ShardSet set(dir.path(), 0);
  const uint8_t* first = set.record(1024);  // the second half: 4 MiB, 1024 pages
  auto resident = [&] {
    std::vector<unsigned char> pages(1024);
    EXPECT_EQ(::mincore(const_cast<uint8_t*>(first), 1024 * 4096, pages.data()), 0);
    int n = 0;
    for (unsigned char p : pages) n += p & 1;
    return n;
  };
  if (resident() > 512) GTEST_SKIP() << "the page cache kept the shard (tmpfs?): nothing to read ahead";
  data::Prefetcher prefetcher;
  prefetcher.request({{first, 1024 * 4096}});
  prefetcher.wait_idle();
  EXPECT_EQ(resident(), 1024);
}

// Read pages of the mapped shards are released as the epoch goes: reading 96 MiB leaves the
// resident set far below that (it grows by all of it without the release). What stays mapped
// between releases is the shuffle's working set: the kernel maps whole large folios (up to 2 MiB)
// around each page read, so the blocks here are 2 MiB.
TEST(ShardedDatasetMemory, ReadingAnEpochKeepsTheResidentSetFlat) {
  TempDir dir("cohort_dataset");
  data::Manifest base;
  base.kind = "records";
  base.item_bytes = 4096;
  {
    data::ShardWriter w(dir.path(), base, 32ull << 20);
    const std::vector<uint8_t> recs(4096 * 1024, 3);
    for (int i = 0; i < 24; ++i) w.add_records(recs.data(), 1024);  // 96 MiB in 3 shards
    w.finish();
  }
  auto rss_kib = [] {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1L;
  };
  ShardedDatasetOptions o;
  o.global_batch = 64;
  o.block = 512;
  o.window_blocks = 2;
  ShardedDataset data(dir.path(), 0, 1, o);
  const long before = rss_kib();
  long peak = before;
  while (auto b = data.get_batch(64)) peak = std::max(peak, rss_kib());
  EXPECT_LT(peak - before, 32 * 1024) << "KiB resident after reading 96 MiB";
}

TEST(ShardedDatasetRecords, YieldsRecordBytesInTheGlobalOrder) {
  TempDir dir("cohort_dataset");
  data::Manifest base;
  base.kind = "records";
  base.item_bytes = 3;
  {
    data::ShardWriter w(dir.path(), base, 30);
    std::vector<uint8_t> recs(3 * 50);
    for (size_t i = 0; i < recs.size(); ++i) recs[i] = static_cast<uint8_t>(i / 3);  // record i holds i, i, i
    w.add_records(recs.data(), 50);
    w.finish();
  }
  ShardedDatasetOptions o;
  o.global_batch = 10;
  ShardedDataset data(dir.path(), 0, 1, o);
  auto b = data.get_batch(10);
  ASSERT_TRUE(b);
  ASSERT_EQ(b->data.scalar_type(), torch::kUInt8);
  for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(b->data[j][0].item<int64_t>(), static_cast<int64_t>(data.sample_at(0, j)));
}

}  // namespace
}  // namespace cohort
