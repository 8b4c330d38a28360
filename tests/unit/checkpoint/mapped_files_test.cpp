// A snapshot's files written through shared mappings (checkpoint/storage/mapped_files.h): a
// committed file holds exactly the bytes written through its mapping, with their hash; a retired
// file taken over again comes back to its kept mapping (the same pages, none mapped anew); a
// different size is mapped again and the file cut to it; a deleted file's mapping is let go at the
// next save (its pages freed); what is not a regular file is refused; a commit that would rename
// another file than the mapped one fails. The full file system is
// tests/integration/checkpoint_process_test.cpp (SnapshotFullDisk). No torch.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/storage/mapped_files.h"
#include "cohort/error.h"

namespace fs = std::filesystem;
using namespace cohort::ckpt;

namespace {

// On tmpfs where there is one: what snapshots use.
std::string mapped_dir(const std::string& name) {
  const fs::path root = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path p = root / ("cohort_mapped_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p / "step");
  return p.string();
}

std::string read_mapped(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void fill_mapping(const Mapping& m, char seed) {
  for (uint64_t i = 0; i < m.bytes; ++i) m.data[i] = static_cast<char>(seed + i * 7);
}

uint64_t hash_of_bytes(const std::string& bytes) {
  Hasher h;
  h.update(bytes.data(), bytes.size());
  return h.digest();
}

}  // namespace

TEST(MappedFiles, ACommittedFileHoldsTheBytesWrittenThroughItsMappingAndTheirHash) {
  const std::string dir = mapped_dir("commit");
  FileMappings files(0);
  files.begin_save();
  const Mapping& m = files.map(dir + "/spare", 123457);  // not a whole number of pages
  fill_mapping(m, 3);
  const FileRecord r = files.commit(m, dir + "/spare", dir + "/step", "model.safetensors");
  EXPECT_FALSE(fs::exists(dir + "/spare"));
  const std::string bytes = read_mapped(dir + "/step/model.safetensors");
  ASSERT_EQ(bytes.size(), 123457u);
  EXPECT_EQ(r.name, "model.safetensors");
  EXPECT_EQ(r.bytes, 123457u);
  EXPECT_EQ(r.xxh3, hash_of_bytes(bytes));
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], static_cast<char>(3 + i * 7)) << "byte " << i;
  fs::remove_all(dir);
}

TEST(MappedFiles, ARetiredFileComesBackToItsKeptMappingAndAnotherSizeIsMappedAgain) {
  const std::string dir = mapped_dir("reuse");
  FileMappings files(0);
  files.begin_save();
  const Mapping* first = &files.map(dir + "/spare", 50000);
  fill_mapping(*first, 1);
  files.commit(*first, dir + "/spare", dir + "/step", "f");
  struct stat committed {};
  ASSERT_EQ(::stat((dir + "/step/f").c_str(), &committed), 0);
  fs::rename(dir + "/step/f", dir + "/spare");  // retired: waits to be overwritten

  files.begin_save();
  const Mapping* again = &files.map(dir + "/spare", 50000);
  EXPECT_EQ(again, first) << "the retired file was mapped anew";
  EXPECT_EQ(again->ino, committed.st_ino);
  EXPECT_EQ(files.size(), 1u);
  fill_mapping(*again, 9);
  const uint64_t committed_hash = files.commit(*again, dir + "/spare", dir + "/step", "f").xxh3;
  EXPECT_EQ(committed_hash, hash_of_bytes(read_mapped(dir + "/step/f")));
  EXPECT_EQ(read_mapped(dir + "/step/f")[0], 9);

  fs::rename(dir + "/step/f", dir + "/spare");
  files.begin_save();
  const Mapping& smaller = files.map(dir + "/spare", 20000);  // the same file, cut to its new size
  EXPECT_EQ(smaller.ino, committed.st_ino);
  EXPECT_EQ(smaller.bytes, 20000u);
  EXPECT_EQ(files.size(), 1u);
  fill_mapping(smaller, 5);
  files.commit(smaller, dir + "/spare", dir + "/step", "f");
  EXPECT_EQ(fs::file_size(dir + "/step/f"), 20000u);
  fs::remove_all(dir);
}

TEST(MappedFiles, ADeletedFilesMappingIsLetGoAtTheNextSaveAndAnIdleOneAfterAFew) {
  const std::string dir = mapped_dir("deleted");
  FileMappings files(0);
  files.begin_save();
  files.commit(files.map(dir + "/a", 4096), dir + "/a", dir + "/step", "a");
  files.commit(files.map(dir + "/b", 4096), dir + "/b", dir + "/step", "b");
  ASSERT_EQ(files.size(), 2u);
  fs::remove(dir + "/step/a");  // retention deleted it: its pages must not stay held
  files.begin_save();
  EXPECT_EQ(files.size(), 1u);
  for (int i = 0; i < 4; ++i) files.begin_save();  // "b" left the rotation (kept by a checkpoint)
  EXPECT_EQ(files.size(), 0u);
  EXPECT_TRUE(fs::exists(dir + "/step/b"));  // letting go never touches the file
  fs::remove_all(dir);
}

TEST(MappedFiles, WhatIsNotARegularFileIsRefusedWithTheReason) {
  const std::string dir = mapped_dir("refused");
  FileMappings files(3);
  files.begin_save();
  fs::create_directory(dir + "/a-directory");
  fs::create_symlink(dir + "/elsewhere", dir + "/a-link");
  for (const char* name : {"a-directory", "a-link"}) {
    try {
      files.map(dir + "/" + name, 4096);
      ADD_FAILURE() << name << " was mapped";
    } catch (const cohort::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_EQ(e.rank(), 3);
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/elsewhere")) << "a link's target was made";
  EXPECT_EQ(files.size(), 0u);
  fs::remove_all(dir);
}

// A retired file moved to the mapped path while the capture wrote (a commit whose wait gave up):
// the rename takes that file, and the commit says so instead of recording this mapping's hash for it.
TEST(MappedFiles, ACommitThatWouldRenameAnotherFileFailsNamingIt) {
  const std::string dir = mapped_dir("replaced");
  FileMappings files(2);
  files.begin_save();
  const Mapping& m = files.map(dir + "/spare", 8192);
  fill_mapping(m, 4);
  { std::ofstream(dir + "/retired") << "an older snapshot's bytes"; }
  fs::rename(dir + "/retired", dir + "/spare");
  try {
    files.commit(m, dir + "/spare", dir + "/step", "f");
    ADD_FAILURE() << "another file was committed as the mapped one";
  } catch (const cohort::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("another file replaced " + dir + "/spare"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 2);
  }
  fs::remove_all(dir);
}
