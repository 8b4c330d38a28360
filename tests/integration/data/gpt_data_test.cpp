// The GPT example on a prepared data set (issue 46): fortunes prepared by `cohort data prepare`
// with a SentencePiece tokenizer trained on them, read by `gpt --data` through cohort run. A
// 2-rank run stopped mid-epoch and resumed from its checkpoint trains on the uninterrupted run's
// global batches (their hashes, printed by --print-batch-hashes) and ends bitwise on its
// parameters; resumed at 1 rank with the same global batch, the same batches again; a different
// data set at resume is one line naming the fingerprints; the same data set at an http URL (a real
// nginx on loopback) gives the local copy's batches. No torch in this binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/nginx.h"
#include "support/subprocess.h"

namespace fs = std::filesystem;
using namespace cohort::testing;  // run_shell, contains (support/subprocess.h)

namespace {

const std::string kGptBinary = COHORT_GPT;
const std::string kFortunes = "/usr/share/games/fortunes";
const std::string kTinyOnData = " --preset tiny --seq-len 64 --threads 1 --eval-windows 32 --layers 2 --dim 128 --sample-tokens 0 "
                                "--log-every 4 --print-batch-hashes --steps 16 --ckpt-every 4";

// "data batch E:P HASH" lines of rank 0, in order.
std::vector<std::string> batch_hashes(const std::string& output) {
  std::vector<std::string> out;
  std::regex re("\\[0\\] (data batch [0-9]+:[0-9]+ [0-9a-f]{16})");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

std::string checksum_of_run(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("\\[0\\] \\{.*\"param_checksum\":\"([0-9a-f]+)\"")) ? std::string(m[1]) : "";
}

class GptOnPreparedData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::is_directory(kFortunes)) return;
    dir_ = (fs::temp_directory_path() / ("cohort_gpt_data_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Shards of 512 KiB (4 of them): the shuffle crosses shards.
    const auto r = run_shell(kCohort + " data prepare " + kFortunes + " --vocab 1000 --shard-bytes 512KiB --out " + dir_ + "/fortunes");
    prepared_ = r.exit_code == 0;
    if (!prepared_) std::cerr << r.output;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!fs::is_directory(kFortunes)) GTEST_SKIP() << "Debian's fortunes package is not installed";
    ASSERT_TRUE(prepared_);
  }
  static cohort::testing::Run gpt(int ranks, const std::string& args) {
    return run_shell(kCohort + " run --nproc-per-node " + std::to_string(ranks) + " --threads-per-proc 1 -- " + kGptBinary +
                     kTinyOnData + " --data " + dir_ + "/fortunes " + args);
  }
  static std::string dir_;
  static bool prepared_;
};
std::string GptOnPreparedData::dir_;
bool GptOnPreparedData::prepared_ = false;

TEST_F(GptOnPreparedData, StoppedMidEpochAndResumedAtTwoOrOneRanksTrainsOnTheSameGlobalBatches) {
  const auto straight = gpt(2, "--batch 4 --ckpt-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto all = batch_hashes(straight.output);
  ASSERT_EQ(all.size(), 16u) << straight.output;
  EXPECT_EQ(all[0].substr(0, 14), "data batch 0:0");
  EXPECT_EQ(all[15].substr(0, 16), "data batch 0:120") << "8 samples a step, mid-epoch (about 2000 steps an epoch)";

  const auto first = gpt(2, "--batch 4 --stop-at 8 --ckpt-dir " + dir_ + "/stopped");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(batch_hashes(first.output), std::vector<std::string>(all.begin(), all.begin() + 8));
  fs::copy(dir_ + "/stopped", dir_ + "/stopped_for_one", fs::copy_options::recursive);

  // The same world size: the rest of the batches, and bitwise the same parameters at the end.
  const auto two = gpt(2, "--batch 4 --ckpt-dir " + dir_ + "/stopped");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_TRUE(contains(two.output, "resumed from " + dir_ + "/stopped/step-00000008 (step 8)")) << two.output;
  EXPECT_EQ(batch_hashes(two.output), std::vector<std::string>(all.begin() + 8, all.end()));
  EXPECT_EQ(checksum_of_run(two.output), checksum_of_run(straight.output));
  EXPECT_FALSE(checksum_of_run(two.output).empty());

  // One rank with the whole global batch: the same global batches.
  const auto one = gpt(1, "--batch 8 --ckpt-dir " + dir_ + "/stopped_for_one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(batch_hashes(one.output), std::vector<std::string>(all.begin() + 8, all.end()));
}

TEST_F(GptOnPreparedData, ADifferentDataSetAtResumeIsOneLineNamingTheFingerprints) {
  const auto first = gpt(1, "--batch 8 --stop-at 4 --ckpt-dir " + dir_ + "/changed");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Two of the files, with the same tokenizer: a model of the same size, other data.
  const auto prep = run_shell(kCohort + " data prepare " + kFortunes + "/computers " + kFortunes + "/science --tokenizer " +
                              dir_ + "/fortunes/tokenizer.model --out " + dir_ + "/other");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const auto r = run_shell("env -i " + kGptBinary + kTinyOnData + " --batch 8 --data " + dir_ + "/other --ckpt-dir " + dir_ + "/changed");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::regex line("gpt: rank 0: " + dir_ + "/changed/step-00000004: the state of \"data\" does not load: rank 0: "
                        "ShardedDataset: the data set differs from the checkpoint's: fingerprint [0-9a-f]{16} here, "
                        "fingerprint [0-9a-f]{16} in the checkpoint \\(" + dir_ + "/other\\); resume on the data the job started with\n");
  EXPECT_TRUE(std::regex_match(r.output, line)) << r.output;
}

TEST_F(GptOnPreparedData, AtAnHttpUrlTrainsOnTheLocalCopysGlobalBatches) {
  cohort::testing::Nginx server(dir_);
  const std::string url = server.url() + "fortunes";
  const auto no_cache = run_shell("env -i " + kGptBinary + kTinyOnData + " --batch 8 --data " + url + " --ckpt-dir " + dir_ + "/no_cache");
  EXPECT_EQ(no_cache.exit_code, 2) << no_cache.output;
  EXPECT_EQ(no_cache.output, "gpt: rank 0: --data " + url + ": a data set at a URL needs --data-cache DIR (the folder its shards are cached in)\n");

  const auto local = gpt(1, "--batch 8 --stop-at 4 --ckpt-dir " + dir_ + "/local");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto remote = run_shell(kCohort + " run --nproc-per-node 1 --threads-per-proc 1 -- " + kGptBinary + kTinyOnData + " --batch 8 --stop-at 4 --data " +
                                url + " --data-cache " + dir_ + "/cache --ckpt-dir " + dir_ + "/remote");
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  ASSERT_EQ(batch_hashes(local.output).size(), 4u) << local.output;
  EXPECT_EQ(batch_hashes(remote.output), batch_hashes(local.output));
  EXPECT_TRUE(fs::exists(dir_ + "/cache")) << "the shards are read through the cache folder";
}

}  // namespace
