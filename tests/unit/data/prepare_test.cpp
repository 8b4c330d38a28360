// `cohort data prepare` (tools/data_command.cpp, src/data/prepare/) as a user runs it: SentencePiece
// tokens equal spm_encode's, the output does not depend on threads or chunks, IDX records, bad input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "data/shards/manifest.h"
#include "support/files.h"
#include "support/subprocess.h"

namespace cohort::data {
namespace {

using cohort::testing::contains;
using cohort::testing::kCohort;
using cohort::testing::run_shell;
using cohort::testing::slurp;
using cohort::testing::TempDir;
namespace fs = std::filesystem;

const std::string kFortunes = "/usr/share/games/fortunes";
const std::string kSmall = kFortunes + "/debian " + kFortunes + "/art";  // ~100 KB of text, two documents

// Every token of a prepared data set, shard after shard.
std::vector<uint32_t> tokens_of(const std::string& dir) {
  const Manifest m = read_manifest(dir);
  std::vector<uint32_t> out;
  for (const auto& s : m.shards) {
    const std::string bytes = slurp(dir + "/" + s.data.file);
    for (uint64_t i = 0; i < s.items; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, bytes.data() + i * m.item_bytes, m.item_bytes);
      out.push_back(v);
    }
  }
  return out;
}

std::string prepare(const std::string& args) { return kCohort + " data prepare " + args; }

TEST(DataPrepare, SentencePieceTokensEqualSpmEncodeWithTheSameModel) {
  if (run_shell("command -v spm_encode").exit_code != 0) GTEST_SKIP() << "spm_encode missing (scripts/setup-test-tools.sh installs sentencepiece)";
  TempDir dir("cohort_prepare");
  const std::string out = dir.path() + "/set";
  const auto r = run_shell(prepare(kSmall + " --vocab 400 --out " + out + " --shard-bytes 20000"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Manifest m = read_manifest(out);
  EXPECT_EQ(m.tokenizer.kind, "sentencepiece");
  EXPECT_TRUE(contains(r.output, "by words")) << r.output;  // the fast path, checked against spm_encode below
  EXPECT_EQ(m.vocab_size, 400u);
  EXPECT_EQ(m.item_bytes, 2u);
  EXPECT_GT(m.shards.size(), 2u);
  EXPECT_EQ(m.tokenizer.xxh3, xxh3_64(slurp(out + "/tokenizer.model").data(), slurp(out + "/tokenizer.model").size()));
  // spm_encode, line by line with the end-of-sentence id, file after file.
  std::vector<uint32_t> expected;
  for (const char* f : {"debian", "art"}) {
    const auto enc = run_shell("spm_encode --model=" + out + "/tokenizer.model --output_format=id --extra_options=eos < " +
                               kFortunes + "/" + f);
    ASSERT_EQ(enc.exit_code, 0) << enc.output;
    std::istringstream ids(enc.output);
    for (uint32_t id; ids >> id;) expected.push_back(id);
  }
  const std::vector<uint32_t> got = tokens_of(out);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);
  // The tokenizer trained again on the same inputs is the same model.
  const auto again = run_shell(prepare(kSmall + " --vocab 400 --threads 1 --out " + dir.path() + "/again"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(read_manifest(dir.path() + "/again").tokenizer.xxh3, m.tokenizer.xxh3);
}

// prepare encodes word by word through a cache where that is exact; a model whose pieces cross
// spaces (split_by_whitespace=false) must be noticed and encoded line by line.
TEST(DataPrepare, AModelWhosePiecesCrossSpacesStillEqualsSpmEncode) {
  if (run_shell("command -v spm_encode && command -v spm_train").exit_code != 0) GTEST_SKIP() << "spm_train/spm_encode missing";
  TempDir dir("cohort_prepare");
  const std::string model = dir.path() + "/cross";
  auto r = run_shell("spm_train --input=" + kFortunes + "/debian --model_prefix=" + model +
                     " --model_type=bpe --vocab_size=600 --split_by_whitespace=false --minloglevel=2 >/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_shell(prepare(kFortunes + "/debian --tokenizer " + model + ".model --out " + dir.path() + "/set"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "by words")) << r.output;
  const auto enc = run_shell("spm_encode --model=" + model + ".model --output_format=id --extra_options=eos < " + kFortunes + "/debian");
  std::vector<uint32_t> expected;
  std::istringstream ids(enc.output);
  for (uint32_t id; ids >> id;) expected.push_back(id);
  EXPECT_TRUE(tokens_of(dir.path() + "/set") == expected);
}

TEST(DataPrepare, OutputIsTheSameForAnyThreadCountAndChunkSize) {
  TempDir dir("cohort_prepare");
  const std::string inputs = kSmall + " " + kFortunes + "/computers";
  ASSERT_EQ(run_shell(prepare(inputs + " --vocab 300 --threads 1 --out " + dir.path() + "/model")).exit_code, 0);
  for (const std::string tokenizer : {std::string("bytes"), dir.path() + "/model/tokenizer.model"}) {
    const std::string one = dir.path() + "/one", two = dir.path() + "/two";
    fs::remove_all(one);
    fs::remove_all(two);
    auto r = run_shell(prepare(inputs + " --tokenizer " + tokenizer + " --threads 1 --shard-bytes 50000 --out " + one));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run_shell(prepare(inputs + " --tokenizer " + tokenizer + " --threads 2 --chunk-bytes 3000 --shard-bytes 50000 --out " + two));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(slurp(one + "/manifest.json"), slurp(two + "/manifest.json")) << tokenizer;
    const Manifest m = read_manifest(one);
    EXPECT_GE(m.documents(), 3u);  // one document per file, split where a shard ends inside one
    EXPECT_LE(m.documents(), 3u + m.shards.size() - 1);
    for (const auto& s : m.shards) EXPECT_EQ(slurp(one + "/" + s.data.file), slurp(two + "/" + s.data.file)) << s.data.file;
  }
  // Bytes: the tokens are the files' bytes.
  const std::vector<uint32_t> got = tokens_of(dir.path() + "/one");  // the last loop's: the model's
  const std::string text = slurp(kFortunes + "/debian") + slurp(kFortunes + "/art") + slurp(kFortunes + "/computers");
  fs::remove_all(dir.path() + "/bytes");
  ASSERT_EQ(run_shell(prepare(inputs + " --out " + dir.path() + "/bytes")).exit_code, 0);
  const std::vector<uint32_t> bytes = tokens_of(dir.path() + "/bytes");
  ASSERT_EQ(bytes.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(text[i])) << i;
  EXPECT_LT(got.size(), text.size());  // BPE: fewer tokens than bytes
}

TEST(DataPrepare, FashionMnistIdxFilesBecomeRecordsOfImageAndLabel) {
  TempDir dir("cohort_prepare");
  const std::string mnist = "/usr/share/datasets/fashion-mnist/";
  const auto r = run_shell(prepare("--idx " + mnist + "t10k-images-idx3-ubyte.gz " + mnist + "t10k-labels-idx1-ubyte.gz --out " +
                                   dir.path() + "/fm --shard-bytes 1MiB"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Manifest m = read_manifest(dir.path() + "/fm");
  EXPECT_EQ(m.kind, "records");
  EXPECT_EQ(m.item_bytes, 785u);
  EXPECT_EQ(m.items(), 10000u);
  // Record 1234 = image 1234 then label 1234, read here with zlib from the IDX files.
  auto item = [&](const std::string& file, uint64_t header, uint64_t size, uint64_t i) {
    gzFile f = gzopen((mnist + file).c_str(), "rb");
    std::vector<char> buf(header + size * (i + 1));
    gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    gzclose(f);
    return std::string(buf.end() - static_cast<long>(size), buf.end());
  };
  const std::string expected = item("t10k-images-idx3-ubyte.gz", 16, 784, 1234) + item("t10k-labels-idx1-ubyte.gz", 8, 1, 1234);
  const uint64_t per_shard = (1u << 20) / 785;
  const std::string shard = slurp(dir.path() + "/fm/" + m.shards[1234 / per_shard].data.file);
  EXPECT_EQ(shard.substr((1234 % per_shard) * 785, 785), expected);
  const auto v = run_shell(kCohort + " data verify " + dir.path() + "/fm");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_TRUE(contains(v.output, "10000 records of 785 bytes")) << v.output;
}

TEST(DataPrepare, EmptyOrBinaryInputIsOneLine) {
  TempDir dir("cohort_prepare");
  const std::string empty = dir.path() + "/empty.txt", binary = dir.path() + "/blob.txt";
  std::ofstream(empty).flush();
  std::ofstream(binary) << std::string("text\0more", 9);
  auto r = run_shell(prepare(empty + " --out " + dir.path() + "/a"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "cohort data: error: no text to prepare: 1 text file(s), all empty\n");
  r = run_shell(prepare(binary + " --out " + dir.path() + "/b"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "cohort data: error: " + binary +
                          ": binary data (a NUL byte), not text; prepare takes text files (records: --records or --idx)\n");
  // A directory: binary files are skipped (fortunes' .dat indexes), the text is prepared.
  fs::create_directory(dir.path() + "/corpus");
  fs::copy_file(kFortunes + "/debian", dir.path() + "/corpus/debian");
  fs::copy_file(kFortunes + "/debian.dat", dir.path() + "/corpus/debian.dat");
  r = run_shell(prepare(dir.path() + "/corpus --out " + dir.path() + "/c"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "skipped 1 binary file(s)")) << r.output;
  EXPECT_EQ(read_manifest(dir.path() + "/c").items(), fs::file_size(kFortunes + "/debian"));
  // Preparing into a data set again is refused, not overwritten.
  r = run_shell(prepare(dir.path() + "/corpus --out " + dir.path() + "/c"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "already holds a prepared data set")) << r.output;
}

TEST(DataPrepare, VerifyNamesACorruptShard) {
  TempDir dir("cohort_prepare");
  ASSERT_EQ(run_shell(prepare(kSmall + " --out " + dir.path() + "/s --shard-bytes 20000")).exit_code, 0);
  auto r = run_shell(kCohort + " data verify " + dir.path() + "/s");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  {
    std::fstream f(dir.path() + "/s/shard-00003.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  r = run_shell(kCohort + " data verify " + dir.path() + "/s");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "cohort data: error: " + dir.path() + "/s/shard-00003.bin: checksum mismatch")) << r.output;
  EXPECT_EQ(cohort::testing::lines(r.output).size(), 1u) << r.output;
}

}  // namespace
}  // namespace cohort::data
