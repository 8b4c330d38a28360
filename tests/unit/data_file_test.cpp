// cohort/data_file.h: a data file is a regular file under its reader's cap; a FIFO is refused
// without waiting for a writer, a device by its kind, a larger file by its size and the cap.
#include "cohort/data_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <future>

namespace {

const cohort::DataFileLimit kTen{10, "this test reads"};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/cohort_data_file_" + std::to_string(::getpid()) + "_" + name;
}

TEST(DataFile, ReadsARegularFileUpToTheCap) {
  const std::string path = temp_path("ten");
  std::ofstream(path) << "0123456789";
  std::string text, problem;
  ASSERT_TRUE(cohort::read_data_file(path, kTen, text, problem)) << problem;
  EXPECT_EQ(text, "0123456789");
  std::ofstream(path, std::ios::app) << "a";
  EXPECT_FALSE(cohort::read_data_file(path, kTen, text, problem));
  EXPECT_EQ(problem, "11 bytes, more than the 10 bytes this test reads");
  ::unlink(path.c_str());
  EXPECT_FALSE(cohort::read_data_file(path, kTen, text, problem));
  EXPECT_EQ(problem, "No such file or directory");
}

TEST(DataFile, DevicesAndDirectoriesAreNamedByTheirKind) {
  std::string text, problem;
  EXPECT_FALSE(cohort::read_data_file("/dev/zero", kTen, text, problem));
  EXPECT_EQ(problem, "not a regular file (a character device)");
  EXPECT_FALSE(cohort::read_data_file(::testing::TempDir(), kTen, text, problem));
  EXPECT_EQ(problem, "not a regular file (a directory)");
}

// Without a writer, a blocking open() of a FIFO never returns. Should it block here, the test
// opens the FIFO for writing itself after 20 s: the read then ends and the test fails instead of
// hanging.
TEST(DataFile, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = temp_path("fifo");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&] { return cohort::open_data_file(path, kTen); });
  if (opened.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "open_data_file blocked on a FIFO";
    const int writer = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  const cohort::DataFile f = opened.get();
  EXPECT_EQ(f.fd, -1);
  EXPECT_EQ(f.problem, "not a regular file (a FIFO)");
  if (f.fd >= 0) ::close(f.fd);
  ::unlink(path.c_str());
}

TEST(DataFile, SizesReadAsPeopleWriteThem) {
  EXPECT_EQ(cohort::byte_size_text(1), "1 byte");
  EXPECT_EQ(cohort::byte_size_text(900), "900 bytes");
  EXPECT_EQ(cohort::byte_size_text(1024), "1 KiB");
  EXPECT_EQ(cohort::byte_size_text(1ull << 30), "1 GiB");
  EXPECT_EQ(cohort::byte_size_text((1ull << 30) + 1), "1.0 GiB");  // over the cap never reads as the cap
  EXPECT_EQ(cohort::byte_size_text(5583457485ull), "5.2 GiB");
}

}  // namespace
