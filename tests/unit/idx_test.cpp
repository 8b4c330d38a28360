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

// The message read_idx throws for `bytes` written to a plain file (empty when it throws none).
std::string error_for(const std::string& name, const std::string& bytes) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  try {
    cohort::read_idx(path, 0);
  } catch (const cohort::ConfigError& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

// Headers that lie: the sizes decide an allocation, so they are checked before it (a libtorch
// allocation error was the answer, many lines long; or an allocation of what the header claimed).
TEST(Idx, CraftedHeadersAreOneLineErrorsBeforeAnyAllocation) {
  const std::string file = temp_path("crafted");
  // 2^31 images of 28 x 28 bytes: 1.5 TiB.
  EXPECT_EQ(error_for("crafted", std::string("\0\0\x08\x03\x80\0\0\0\0\0\0\x1c\0\0\0\x1c", 16)),
            "rank 0: IDX file " + file + " declares a 2147483648 x 28 x 28 array (1.5 TiB), more than the 1 GiB the "
            "example reads into memory");
  // Four sizes of 2^32 - 1: their product overflows 64 bits.
  EXPECT_EQ(error_for("crafted", std::string("\0\0\x08\x04", 4) + std::string(16, '\xff')),
            "rank 0: IDX file " + file + " declares a 4294967295 x 4294967295 x 4294967295 x 4294967295 array (more "
            "than 16 EiB), more than the 1 GiB the example reads into memory");
  // Under the cap, but more than the file holds: refused before allocating 748 MiB.
  EXPECT_EQ(error_for("crafted", std::string("\0\0\x08\x03\0\x0f\x42\x40\0\0\0\x1c\0\0\0\x1c\x01\x02", 18)),
            "rank 0: IDX file " + file + " is truncated or corrupt: it declares a 1000000 x 28 x 28 array (747.6 MiB) in "
            "18 bytes");
  // A wrong magic, an unknown element type.
  EXPECT_EQ(error_for("crafted", std::string("\0\x01\x08\x03\0\0\0\x01", 8)), "rank 0: " + file + " is not an IDX file");
  EXPECT_EQ(error_for("crafted", std::string("\0\0\x07\x01\0\0\0\x01\x00", 9)),
            "rank 0: " + file + " has an unknown IDX element type");
}

// Gzipped: what the compressed bytes can expand to (deflate's ratio is at most 1032:1) bounds
// what the header may claim.
TEST(Idx, AGzippedHeaderClaimingMoreThanItsBytesCanHoldIsRefused) {
  const std::string path = temp_path("gz_claim");
  gzFile gz = gzopen((path + ".gz").c_str(), "wb");
  const unsigned char header[] = {0, 0, 0x08, 3, 0, 0x0f, 0x42, 0x40, 0, 0, 0, 28, 0, 0, 0, 28};  // 10^6 x 28 x 28
  gzwrite(gz, header, sizeof(header));
  gzclose(gz);
  try {
    cohort::read_idx(path, 2);
    FAIL() << "a 748 MiB claim in a few bytes was read";
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2: IDX file " + path + ".gz is truncated or corrupt: it declares a 1000000 x "
                                         "28 x 28 array (747.6 MiB) in "),
              std::string::npos)
        << e.what();
  }
  std::remove((path + ".gz").c_str());
}

// A device is not a data file: /dev/zero would be read for ever (a FIFO: see example_test.cpp,
// where the process must end by itself).
TEST(Idx, ADeviceIsRefusedByItsKind) {
  try {
    cohort::read_idx("/dev/zero", 0);
    FAIL();
  } catch (const cohort::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 0: IDX file /dev/zero: not a regular file (a character device)");
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
