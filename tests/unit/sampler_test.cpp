// DistributedSampler: coverage per epoch, padding and drop_last, determinism, use with
// make_data_loader, and resuming on a different world size.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "cohort/distributed_sampler.h"
#include "cohort/error.h"

namespace {

using cohort::DistributedSampler;
using cohort::SamplerOptions;

std::vector<size_t> drain(DistributedSampler& s, size_t batch, size_t max_batches = SIZE_MAX) {
  std::vector<size_t> out;
  for (size_t b = 0; b < max_batches; ++b) {
    auto next = s.next(batch);
    if (!next) break;
    out.insert(out.end(), next->begin(), next->end());
  }
  return out;
}

// Every rank's samples for one epoch.
std::vector<std::vector<size_t>> epoch_of(size_t n, int world, SamplerOptions opt, int64_t epoch) {
  std::vector<std::vector<size_t>> out;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, r, world, opt);
    s.set_epoch(epoch);
    s.reset();
    out.push_back(drain(s, 7));
  }
  return out;
}

TEST(Sampler, DisjointAndCompleteWhenTheWorldDividesTheDataset) {
  for (int world : {1, 2, 3, 4}) {
    auto ranks = epoch_of(120, world, {}, 0);
    std::multiset<size_t> all;
    for (auto& r : ranks) {
      EXPECT_EQ(r.size(), 120u / world);
      all.insert(r.begin(), r.end());
    }
    std::set<size_t> unique(all.begin(), all.end());
    EXPECT_EQ(all.size(), 120u) << "world " << world;
    EXPECT_EQ(unique.size(), 120u) << "world " << world;
  }
}

TEST(Sampler, PaddingRepeatsTheFewestSamplesAndEqualisesRanks) {
  // 10 samples over 4 ranks: 3 each, 12 slots, 2 samples repeated.
  auto ranks = epoch_of(10, 4, {}, 0);
  std::map<size_t, int> count;
  for (auto& r : ranks) {
    EXPECT_EQ(r.size(), 3u);
    for (size_t i : r) count[i]++;
  }
  EXPECT_EQ(count.size(), 10u);  // complete
  int repeated = 0;
  for (auto& [i, c] : count) repeated += c - 1;
  EXPECT_EQ(repeated, 2);
}

TEST(Sampler, DropLastDropsTheTail) {
  auto ranks = epoch_of(10, 4, {.shuffle = true, .seed = 0, .drop_last = true}, 0);
  std::set<size_t> seen;
  for (auto& r : ranks) {
    EXPECT_EQ(r.size(), 2u);
    for (size_t i : r) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
  }
  EXPECT_EQ(seen.size(), 8u);
}

TEST(Sampler, DeterministicPerSeedAndEpochAndDifferentAcrossEpochs) {
  auto a = epoch_of(1000, 2, {.seed = 7}, 3);
  auto b = epoch_of(1000, 2, {.seed = 7}, 3);
  auto c = epoch_of(1000, 2, {.seed = 7}, 4);
  auto d = epoch_of(1000, 2, {.seed = 8}, 3);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(Sampler, WithoutShuffleRankTakesEveryWorldthSample) {
  auto ranks = epoch_of(9, 3, {.shuffle = false}, 5);
  EXPECT_EQ(ranks[0], (std::vector<size_t>{0, 3, 6}));
  EXPECT_EQ(ranks[1], (std::vector<size_t>{1, 4, 7}));
  EXPECT_EQ(ranks[2], (std::vector<size_t>{2, 5, 8}));
}

TEST(Sampler, CopiesShareStateSoSetEpochReachesTheDataLoader) {
  // make_data_loader keeps its own copy of the sampler; set_epoch on ours must still apply.
  auto data = torch::arange(100).to(torch::kFloat);
  auto dataset = torch::data::datasets::TensorDataset(data).map(torch::data::transforms::Stack<torch::data::TensorExample>());
  DistributedSampler sampler(100, 0, 2, {.seed = 1});
  auto loader = torch::data::make_data_loader(std::move(dataset), sampler, torch::data::DataLoaderOptions(10));
  std::vector<std::vector<int64_t>> per_epoch;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    sampler.set_epoch(epoch);
    per_epoch.emplace_back();
    for (auto& batch : *loader) {
      for (int64_t i = 0; i < batch.data.size(0); ++i) per_epoch.back().push_back(batch.data[i].item<int64_t>());
    }
    EXPECT_EQ(per_epoch.back().size(), 50u);
  }
  EXPECT_NE(per_epoch[0], per_epoch[1]);
  auto expected = epoch_of(100, 2, {.seed = 1}, 1)[0];
  EXPECT_EQ(std::vector<size_t>(per_epoch[1].begin(), per_epoch[1].end()), expected);
}

// Mid-epoch state saved at `from` ranks after `batches` batches, restored at `to` ranks: the
// samples consumed before plus those after cover the epoch exactly once.
void check_resume(size_t n, int from, int to, size_t batch, size_t batches) {
  SCOPED_TRACE("n=" + std::to_string(n) + " " + std::to_string(from) + "->" + std::to_string(to));
  std::multiset<size_t> seen;
  cohort::SamplerState saved;
  for (int r = 0; r < from; ++r) {
    DistributedSampler s(n, r, from, {.seed = 3});
    s.set_epoch(2);
    s.reset();
    auto got = drain(s, batch, batches);
    seen.insert(got.begin(), got.end());
    saved = s.state();  // equal on every rank
  }
  EXPECT_EQ(saved.epoch, 2);
  EXPECT_EQ(saved.consumed, static_cast<int64_t>(std::min(n, batch * batches * from)));
  // The state travels as JSON, as it does in a checkpoint.
  auto restored = cohort::SamplerState::from_json(saved.to_json());
  std::vector<size_t> after;
  for (int r = 0; r < to; ++r) {
    DistributedSampler s(n, r, to, {.seed = 3});
    s.load_state(restored);
    s.set_epoch(restored.epoch);  // the training loop's usual call keeps the restored position
    s.reset();
    auto got = drain(s, batch);
    after.insert(after.end(), got.begin(), got.end());
  }
  std::multiset<size_t> rest(after.begin(), after.end());
  const size_t remaining = n - static_cast<size_t>(saved.consumed);
  const size_t padding = (to - remaining % to) % to;
  EXPECT_EQ(after.size(), remaining + padding);
  for (size_t i : seen) EXPECT_EQ(rest.count(i), 0u) << "sample " << i << " repeated after the resume";
  std::set<size_t> all(seen.begin(), seen.end());
  all.insert(after.begin(), after.end());
  EXPECT_EQ(all.size(), n) << "samples lost";
  EXPECT_EQ(seen.size() + std::set<size_t>(after.begin(), after.end()).size(), n) << "nothing twice";
}

TEST(Sampler, ResumeOnADifferentWorldSizeCoversTheRestExactlyOnce) {
  check_resume(1200, 4, 3, 10, 7);  // 4 → 3 mid-epoch: 280 consumed, 920 left over 3 ranks
  check_resume(1200, 4, 2, 10, 7);
  check_resume(1200, 2, 4, 10, 11);
  check_resume(1201, 3, 3, 16, 5);
  check_resume(999, 4, 1, 8, 3);
}

TEST(Sampler, StateAtTheEndOfAnEpochResumesIntoAnEmptyRemainder) {
  DistributedSampler a(40, 0, 2, {});
  a.reset();
  drain(a, 8);
  auto st = a.state();
  EXPECT_EQ(st.consumed, 40);
  DistributedSampler b(40, 0, 4, {});
  b.load_state(st);
  b.reset();
  EXPECT_FALSE(b.next(8).has_value());  // epoch 0 is done; set_epoch(1) starts the next
  b.set_epoch(1);
  b.reset();
  EXPECT_EQ(drain(b, 8).size(), 10u);
}

TEST(Sampler, LoadingAStateOfAnotherDatasetIsAClearError) {
  DistributedSampler s(100, 1, 2, {.seed = 1});
  cohort::SamplerState st;
  st.dataset_size = 50;
  st.seed = 1;
  try {
    s.load_state(st);
    FAIL() << "expected an error";
  } catch (const cohort::ConfigError& e) {
    EXPECT_STREQ(e.what(), "rank 1: sampler state is for a dataset of 50 samples, this one has 100");
  }
  st.dataset_size = 100;
  st.seed = 2;
  EXPECT_THROW(s.load_state(st), cohort::ConfigError);
  EXPECT_THROW(cohort::SamplerState::from_json("{not json"), cohort::ConfigError);
}

// The peer: torch.utils.data.DistributedSampler on the same libtorch gives the same indices.
TEST(Sampler, ANullContextIsAClearError) {
  try {
    cohort::DistributedSampler s(10, std::shared_ptr<cohort::Context>(), {});
    FAIL() << "a null Context was accepted";
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the Context that cohort::init() returns"), std::string::npos) << e.what();
  }
}

TEST(Sampler, SameOrderAsPyTorchsDistributedSampler) {
  const char* python = std::getenv("COHORT_PYTHON");
  if (!python || std::system((std::string(python) + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no Python with torch (set COHORT_PYTHON)";
  }
  const std::string cmd = std::string(python) +
                          " -c 'import torch.utils.data as d; s=d.DistributedSampler(range(103), num_replicas=3, "
                          "rank=1, shuffle=True, seed=5); s.set_epoch(2); print(\" \".join(map(str, s)))'";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::vector<size_t> theirs;
  unsigned long v;
  while (fscanf(p, "%lu", &v) == 1) theirs.push_back(v);
  ASSERT_EQ(pclose(p), 0);
  DistributedSampler ours(103, 1, 3, {.shuffle = true, .seed = 5});
  ours.set_epoch(2);
  ours.reset();
  EXPECT_EQ(drain(ours, 5), theirs);
}

}  // namespace
