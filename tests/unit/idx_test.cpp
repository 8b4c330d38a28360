// IDX reader: shape, values and byte order of a file written here; clear errors for bad files.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "cohort/error.h"
#include "idx.h"

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/cohort_idx_" + std::to_string(::getpid()) + "_" + name;
}

TEST(Idx, ReadsGzippedIntFilesBigEndian) {
  const std::string path = temp_path("ints");
  gzFile gz = gzopen((path + ".gz").c_str(), "wb");
  const unsigned char header[] = {0, 0, 0x0C, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  gzwrite(gz, header, sizeof(header));
  for (int v = 0; v < 6; ++v) {
    const unsigned char b[] = {0, 0, 1, static_cast<unsigned char>(v)};  // 256 + v
    gzwrite(gz, b, 4);
  }
  gzclose(gz);
  auto t = cohort::read_idx(path);  // finds path.gz
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.scalar_type(), torch::kInt);
  EXPECT_TRUE(t.equal(torch::arange(256, 262, torch::kInt).view({2, 3})));
}

TEST(Idx, MissingAndTruncatedFilesAreClearErrors) {
  try {
    cohort::read_idx("/nonexistent/train-images-idx3-ubyte", 1);
    FAIL();
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: IDX file not found: /nonexistent/train-images-idx3-ubyte"),
              std::string::npos);
  }
  const std::string path = temp_path("short");
  std::ofstream(path, std::ios::binary).write("\0\0\x08\x01\0\0\0\x09\x01\x02", 10);  // 9 bytes promised, 2 there
  try {
    cohort::read_idx(path);
    FAIL();
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos);
  }
}

TEST(Idx, ReadsTheInstalledFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  std::ifstream probe(dir + "/t10k-labels-idx1-ubyte.gz");
  if (!probe) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto labels = cohort::read_idx(dir + "/t10k-labels-idx1-ubyte");
  auto images = cohort::read_idx(dir + "/t10k-images-idx3-ubyte");
  EXPECT_EQ(labels.sizes(), (std::vector<int64_t>{10000}));
  EXPECT_EQ(images.sizes(), (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(labels.max().item<int>(), 9);
  EXPECT_EQ(torch::bincount(labels.to(torch::kLong)).min().item<int64_t>(), 1000);  // balanced classes
}

}  // namespace
