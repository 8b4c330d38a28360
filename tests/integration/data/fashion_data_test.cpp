// The Fashion-MNIST example on prepared record data sets (issue 46): Debian's IDX files prepared by
// `cohort data prepare --idx IMAGES LABELS` into DIR/train and DIR/t10k, given as --data DIR, train
// to bitwise the parameters and the test accuracy the IDX folder gives. No torch in this binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "support/subprocess.h"

namespace {

using cohort::testing::run_shell;

const std::string kFashionIdx = "/usr/share/datasets/fashion-mnist";

std::string json_field_of(const std::string& output, const std::string& name) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("\"" + name + "\":(\"[^\"]*\"|[-0-9.e+]+)")) ? std::string(m[1]) : "";
}

TEST(FashionOnPreparedData, PreparedRecordsTrainBitwiseAsTheIdxFilesDo) {
  if (!std::ifstream(kFashionIdx + "/train-images-idx3-ubyte.gz").good()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string dir = (std::filesystem::temp_directory_path() / ("cohort_fashion_prepared_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  for (const std::string split : {"train", "t10k"}) {
    const auto r = run_shell(cohort::testing::kCohort + " data prepare --idx " + kFashionIdx + "/" + split + "-images-idx3-ubyte.gz " +
                             kFashionIdx + "/" + split + "-labels-idx1-ubyte.gz --out " + dir + "/" + split);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string example = std::string(COHORT_FASHION_MNIST) + " --model mlp --max-steps 6 --threads 1 --seed 3 --data ";  // the MLP: evaluating the CNN on t10k takes seconds
  const auto idx = run_shell("env -i " + example + kFashionIdx);
  const auto prepared = run_shell("env -i " + example + dir);
  ASSERT_EQ(idx.exit_code, 0) << idx.output;
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  EXPECT_FALSE(json_field_of(idx.output, "param_checksum").empty()) << idx.output;
  EXPECT_EQ(json_field_of(prepared.output, "param_checksum"), json_field_of(idx.output, "param_checksum"));
  EXPECT_EQ(json_field_of(prepared.output, "test_accuracy"), json_field_of(idx.output, "test_accuracy"));
  // Tokens where records belong: one line naming the directory.
  std::filesystem::remove_all(dir + "/train");
  { std::ofstream(dir + "/words.txt") << std::string(4096, 'a') << "\n"; }
  ASSERT_EQ(run_shell(cohort::testing::kCohort + " data prepare " + dir + "/words.txt --out " + dir + "/train").exit_code, 0);
  const auto tokens = run_shell("env -i " + example + dir);
  EXPECT_EQ(tokens.exit_code, 2) << tokens.output;
  EXPECT_EQ(tokens.output, "fashion_mnist: rank 0: " + dir + "/train holds tokens; a prepared Fashion-MNIST holds records of 785 "
                           "(cohort data prepare --idx IMAGES LABELS)\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
