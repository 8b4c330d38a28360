// The checkpoint files' writer (checkpoint/storage/file_io.h, direct_writer.h): every byte lands exactly,
// at sizes around the block and buffer boundaries and in uneven pieces, with the hash of what was
// written — through O_DIRECT where the file system takes it (here: the temp directory's ext4) and
// through the page cache; and O_DIRECT really bypasses the page cache; a retired file taken over.
// No torch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/storage/direct_writer.h"
#include "checkpoint/storage/file_io.h"

namespace fs = std::filesystem;
using namespace cohort::ckpt;

namespace {

std::string fresh_dir(const fs::path& root, const std::string& name) {
  const fs::path p = root / ("cohort_file_io_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

bool takes_o_direct(const std::string& dir) {
  const std::string probe = dir + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

std::string contents_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<char> out(n);
  for (auto& c : out) c = static_cast<char>(gen());
  return out;
}

// Pages of the file the page cache holds (mincore over a mapping of it).
size_t cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st {};
  ::fstat(fd, &st);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t pages = (static_cast<size_t>(st.st_size) + page - 1) / page;
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  std::vector<unsigned char> resident(pages);
  ::mincore(map, static_cast<size_t>(st.st_size), resident.data());
  ::munmap(map, static_cast<size_t>(st.st_size));
  ::close(fd);
  size_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  return n;
}

void write_and_check(const std::string& dir, size_t size, bool direct) {
  const auto data = random_bytes(size, static_cast<unsigned>(size));
  const std::string name = "f" + std::to_string(size);
  AtomicWriter w(dir, name, 0, direct);
  EXPECT_EQ(w.direct(), direct);
  // Uneven pieces: a small header-like one, then the rest in slices that do not line up with blocks.
  size_t at = 0;
  for (size_t piece : {size_t{13}, size_t{4000}, size_t{5u << 20}, size_t{7}, size}) {
    const size_t n = std::min(piece, size - at);
    w.write(data.data() + at, n);
    at += n;
  }
  const FileRecord rec = w.finish();
  Hasher h;
  h.update(data.data(), data.size());
  EXPECT_EQ(rec.bytes, size);
  EXPECT_EQ(rec.xxh3, h.digest()) << size;
  EXPECT_EQ(fs::file_size(dir + "/" + name), size);
  EXPECT_TRUE(contents_of(dir + "/" + name) == std::string(data.begin(), data.end())) << "bytes differ at size " << size;
  EXPECT_EQ(hash_file(dir, name, 0).xxh3, rec.xxh3);
}

const std::vector<size_t> kSizes = {0,
                                    1,
                                    DirectWriter::kAlign - 1,
                                    DirectWriter::kAlign,
                                    DirectWriter::kAlign + 1,
                                    DirectWriter::kBufferBytes - 1,
                                    DirectWriter::kBufferBytes,
                                    DirectWriter::kBufferBytes + 1,
                                    3 * DirectWriter::kBufferBytes + 12345};

}  // namespace

TEST(CheckpointFileWriter, EveryByteLandsThroughODirect) {
  const std::string dir = fresh_dir(fs::temp_directory_path(), "direct");
  if (!takes_o_direct(dir)) GTEST_SKIP() << fs::temp_directory_path() << " does not take O_DIRECT";
  for (size_t size : kSizes) write_and_check(dir, size, true);
  fs::remove_all(dir);
}

// The page-cache path, which file systems without O_DIRECT get (ramfs, some FUSE; the process
// test CheckpointNoDirectIo runs a whole save on ramfs).
TEST(CheckpointFileWriter, EveryByteLandsThroughThePageCache) {
  const std::string dir = fresh_dir(fs::temp_directory_path(), "buffered");
  for (size_t size : kSizes) write_and_check(dir, size, false);
  fs::remove_all(dir);
}

TEST(CheckpointFileWriter, ODirectLeavesThePageCacheAlone) {
  const std::string dir = fresh_dir(fs::temp_directory_path(), "cache");
  if (!takes_o_direct(dir)) GTEST_SKIP() << fs::temp_directory_path() << " does not take O_DIRECT";
  const auto data = random_bytes(16u << 20, 1);
  {
    AtomicWriter w(dir, "direct", 0);
    w.write(data.data(), data.size());
    w.finish();
  }
  {
    std::ofstream out(dir + "/buffered", std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const size_t pages = data.size() / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(cached_pages(dir + "/buffered"), pages) << "the yardstick: a buffered write is all in the page cache";
  EXPECT_EQ(cached_pages(dir + "/direct"), 0u) << "the checkpoint writer went through the page cache";
  fs::remove_all(dir);
}

// A retired file taken over (snapshots' pages written in place): the same inode, overwritten from
// the start and cut to what was written, the old name gone. A reuse path that is not a regular
// file (a symbolic link, a directory) is left as it is and a new file made.
TEST(CheckpointFileWriter, ATakenOverFileIsOverwrittenAndCutAndOnlyRegularFilesAreTaken) {
  const std::string dir = fresh_dir(fs::temp_directory_path(), "reuse");
  const std::string old_file = dir + "/old";
  std::ofstream(old_file) << std::string(100, 'x');
  struct stat before {};
  ASSERT_EQ(::stat(old_file.c_str(), &before), 0);
  const std::string text = "0123456789";
  {
    AtomicWriter w(dir, "new", 0, /*allow_direct=*/false, old_file);
    w.write(text.data(), text.size());
    const FileRecord r = w.finish();
    EXPECT_EQ(r.bytes, text.size());
  }
  struct stat after {};
  ASSERT_EQ(::stat((dir + "/new").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_size, static_cast<off_t>(text.size()));
  EXPECT_FALSE(fs::exists(old_file));
  std::ifstream in(dir + "/new");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);

  fs::create_symlink(dir + "/new", dir + "/link");
  fs::create_directory(dir + "/a_directory");
  for (const char* odd : {"link", "a_directory"}) {
    AtomicWriter w(dir, std::string("from_") + odd, 0, false, dir + "/" + odd);
    w.write(text.data(), text.size());
    w.finish();
    EXPECT_TRUE(fs::exists(fs::symlink_status(dir + "/" + odd))) << odd << " was taken";
    EXPECT_EQ(fs::file_size(dir + "/from_" + odd), text.size()) << odd;
  }
  EXPECT_EQ(fs::file_size(dir + "/new"), text.size());  // the link's target untouched
  fs::remove_all(dir);
}
