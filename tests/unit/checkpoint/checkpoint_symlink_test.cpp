// Symbolic links in a checkpoint folder (issue 50): a step-* that is a link to a directory outside
// the folder is never written into, read, restored or emptied, by saves, restore, retention or
// snapshots; a file in a step directory that is a link is replaced or unlinked, never its target.
// Each test plants links to a directory outside the folder holding sentinel files and checks that
// they are there afterwards, unchanged and unread (their access times, on a file system that keeps
// them: relatime updates an access time older than the file's modification at the first read).
// The `cohort ckpt` side is CheckpointCli in tests/integration/checkpoint_process_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/snapshots/snapshots.h"
#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/storage/file_io.h"
#include "cohort/checkpointer.h"
#include "support/thread_ranks.h"
#include "checkpoint_fixtures.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;
namespace symlink_test {  // named: the unity build joins every test file's anonymous namespace

using checkpoint_test::Trainer;

std::string contents(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

constexpr time_t kOldAccess = 1000000000;  // 2001: before any file made now was modified

// Every regular file under `dir` (relative name → contents), each marked as not read since.
std::map<std::string, std::string> mark_sentinels(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    out[fs::relative(e.path(), dir).string()] = contents(e.path());
    const struct timespec times[2] = {{kOldAccess, 0}, {0, UTIME_OMIT}};
    ::utimensat(AT_FDCWD, e.path().c_str(), times, 0);
  }
  return out;
}

// The directory holds exactly `sentinels` (nothing removed, added or changed), none of them read.
void expect_untouched(const fs::path& dir, const std::map<std::string, std::string>& sentinels) {
  std::map<std::string, struct stat> seen;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    if (!S_ISDIR(st.st_mode)) seen[fs::relative(e.path(), dir).string()] = st;
  }
  std::map<std::string, std::string> now;
  for (const auto& [name, st] : seen) {
    EXPECT_EQ(st.st_atime, kOldAccess) << dir / name << " was read";  // before contents() reads it
    now[name] = contents(dir / name);
    const struct timespec times[2] = {{kOldAccess, 0}, {0, UTIME_OMIT}};  // for the next check
    ::utimensat(AT_FDCWD, (dir / name).c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
  EXPECT_EQ(now, sentinels) << "the files outside the checkpoint folder changed";
}

// Outside the folder: a manifest that would be taken for a checkpoint's, and files named like its.
fs::path outside_with_sentinels(const std::string& name) {
  const fs::path dir = checkpoint_test::fresh_dir(name);
  fs::create_directories(dir);
  std::ofstream(dir / "manifest.json") << R"({"not": "a checkpoint"})";
  std::ofstream(dir / "model.safetensors") << "a file that is not the checkpoint's";
  std::ofstream(dir / "notes.txt") << "sentinel";
  return dir;
}

Trainer make_trainer(std::shared_ptr<Context> ctx) { return Trainer(ctx, "sgd", initial_parameters(7)); }

// `steps` training steps with a save at each multiple of `every`; returns the last error.
std::string train(const std::string& dir, int steps, CheckpointOptions options, int world = 1) {
  const auto batches = make_batches(steps, 8);
  std::string error;
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    Trainer t = make_trainer(ctx);
    Checkpointer checkpoints(dir, ctx, options);
    for (int s = 0; s < steps; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(t.state());
      if (ctx->rank() == 0 && !checkpoints.last_error().empty()) error = checkpoints.last_error();
    }
    try {
      checkpoints.wait();
    } catch (const std::exception& e) {
      if (ctx->rank() == 0) error = e.what();
    }
  }, {.same_machine = true});
  return error;
}

}  // namespace symlink_test

namespace sl = symlink_test;

TEST(CheckpointSymlinks, SaveRefusesAStepThatIsALinkAndReplacesLinkedFiles) {
  const std::string dir = checkpoint_test::fresh_dir("link_save");
  const fs::path outside = sl::outside_with_sentinels("link_save_outside");
  const auto sentinels = sl::mark_sentinels(outside);
  fs::create_directories(dir);
  fs::create_directory_symlink(outside, dir + "/step-00000001");
  // A real step directory whose file is a link out: the save replaces the link, not its target.
  fs::create_directories(dir + "/step-00000002");
  fs::create_symlink(outside / "notes.txt", dir + "/step-00000002/model.safetensors");

  const std::string error = sl::train(dir, 2, {.every_steps = 1, .async = false});
  sl::expect_untouched(outside, sentinels);
  EXPECT_NE(error.find("could not save step 1 into " + dir + "/step-00000001: a symbolic link to " + outside.string()),
            std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_TRUE(fs::is_symlink(dir + "/step-00000001"));
  EXPECT_EQ(ckpt::verify_checkpoint(dir + "/step-00000002"), "");
  EXPECT_FALSE(fs::is_symlink(dir + "/step-00000002/model.safetensors"));
  const auto listed = ckpt::list_checkpoints(dir);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_FALSE(listed[1].manifest.has_value());
  EXPECT_NE(listed[1].problem.find("a symbolic link to " + outside.string()), std::string::npos) << listed[1].problem;
}

// The writer's temporary file is a new one of its own (O_EXCL | O_NOFOLLOW): a link planted under
// the name it will use is removed, not written through.
TEST(CheckpointSymlinks, AnAtomicWriteGoesThroughNoPlantedLink) {
  const std::string dir = checkpoint_test::fresh_dir("link_tmp");
  const fs::path outside = sl::outside_with_sentinels("link_tmp_outside");
  fs::create_directories(dir);
  const auto sentinels = sl::mark_sentinels(outside);
  int64_t next = -1;
  {  // the counter in its temporary file's name: the next writer's is one more
    ckpt::AtomicWriter probe(dir, "probe", 0, /*allow_direct=*/false);
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      next = std::stoll(name.substr(name.rfind('-') + 1)) + 1;
    }
  }
  ASSERT_GE(next, 0);
  for (int64_t n = next; n < next + 8; ++n)
    fs::create_symlink(outside / "notes.txt", dir + "/x.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(n));
  for (bool direct : {false, true}) {
    ckpt::AtomicWriter w(dir, "x", 0, direct);
    w.write("new bytes", 9);
    w.finish();
  }
  sl::expect_untouched(outside, sentinels);
  EXPECT_EQ(sl::contents(dir + "/x"), "new bytes");
  // Into a directory that is a link, nothing: the error names it.
  fs::create_directory_symlink(outside, dir + "/linked");
  try {
    ckpt::AtomicWriter w(dir + "/linked", "y", 0);
    ADD_FAILURE() << "wrote into a link";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/linked is a symbolic link"), std::string::npos) << e.what();
  }
  sl::expect_untouched(outside, sentinels);
}

TEST(CheckpointSymlinks, RestoreSkipsALinkedStepForTheNewestRealOne) {
  const std::string dir = checkpoint_test::fresh_dir("link_restore");
  const std::string elsewhere = checkpoint_test::fresh_dir("link_restore_elsewhere");
  ASSERT_EQ(sl::train(dir, 1, {.every_steps = 1, .async = false}), "");
  ASSERT_EQ(sl::train(elsewhere, 9, {.every_steps = 9, .async = false}), "");  // a valid checkpoint of step 9, outside
  fs::create_directory_symlink(elsewhere + "/step-00000009", dir + "/step-00000009");
  const auto sentinels = sl::mark_sentinels(elsewhere + "/step-00000009");
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    auto t = sl::make_trainer(ctx);
    Checkpointer checkpoints(dir, ctx);
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->step, 1);
    EXPECT_EQ(info->path, dir + "/step-00000001");
  });
  sl::expect_untouched(elsewhere + "/step-00000009", sentinels);
  EXPECT_NE(ckpt::verify_checkpoint(dir + "/step-00000009").find("a symbolic link"), std::string::npos);
  EXPECT_NE(ckpt::verify_checkpoint(dir + "/step-00000009/").find("a symbolic link"), std::string::npos);
}

// Retention keeps links where they are (cohort makes none: one there is someone's) and never
// looks into them; in a real retired step, a link is unlinked and its target stays.
TEST(CheckpointSymlinks, RetentionNeverEmptiesALinksTarget) {
  const std::string dir = checkpoint_test::fresh_dir("link_retention");
  const fs::path outside = sl::outside_with_sentinels("link_retention_outside");
  fs::create_directories(dir);
  const auto sentinels = sl::mark_sentinels(outside);
  fs::create_directory_symlink(outside, dir + "/step-00000001");
  ASSERT_EQ(sl::train(dir, 2, {.every_steps = 2, .keep_last = 1, .async = false}), "");  // step 2
  fs::create_symlink(outside / "notes.txt", dir + "/step-00000002/notes.txt");
  fs::create_directory_symlink(outside, dir + "/step-00000002/sub");
  ASSERT_EQ(sl::train(dir, 4, {.every_steps = 4, .keep_last = 1, .async = false}), "");  // step 4 retires 2
  sl::expect_untouched(outside, sentinels);
  EXPECT_TRUE(fs::is_symlink(dir + "/step-00000001"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  EXPECT_EQ(ckpt::verify_checkpoint(dir + "/step-00000004"), "");
  // Removing a linked step directly removes nothing either.
  EXPECT_FALSE(ckpt::remove_checkpoint(dir + "/step-00000001"));
  sl::expect_untouched(outside, sentinels);
}

// Snapshots: a linked step in the snapshot directory and linked spare directories (where a
// snapshot's files wait to be overwritten in place) get no file and lose none; restore skips a
// linked valid snapshot of a newer step and, going back to an older one, leaves it as it is.
TEST(CheckpointSymlinks, SnapshotsNeitherWriteNorRemoveNorRestoreThroughLinks) {
  const std::string disk = checkpoint_test::fresh_dir("link_snap_disk");
  const std::string memory = checkpoint_test::fresh_dir("link_snap_memory");
  const std::string elsewhere_disk = checkpoint_test::fresh_dir("link_snap_elsewhere");
  const std::string elsewhere = checkpoint_test::fresh_dir("link_snap_elsewhere_mem");
  const fs::path outside = sl::outside_with_sentinels("link_snap_outside");
  const CheckpointOptions options{.snapshot_every_steps = 1, .snapshot_dir = memory};
  std::string why_none;
  const std::string job_dir = ckpt::snapshot_dir_for(memory, disk, &why_none);
  fs::create_directories(job_dir);
  fs::create_directory_symlink(outside, job_dir + "/step-00000001");
  fs::create_directory_symlink(outside, job_dir + "/.spare-0");
  fs::create_directory_symlink(outside, job_dir + "/.spare-1");
  // A valid snapshot of step 9 made by the same program, outside.
  ASSERT_EQ(sl::train(elsewhere_disk, 9, {.snapshot_every_steps = 1, .snapshot_dir = elsewhere}, 2), "");
  const std::string snapshot9 = ckpt::snapshot_dir_for(elsewhere, elsewhere_disk, &why_none) + "/step-00000009";
  ASSERT_EQ(ckpt::verify_checkpoint(snapshot9), "");
  fs::create_directory_symlink(snapshot9, job_dir + "/step-00000009");
  const auto sentinels = sl::mark_sentinels(outside);
  const auto sentinels9 = sl::mark_sentinels(snapshot9);

  sl::train(disk, 5, options, 2);
  sl::expect_untouched(outside, sentinels);
  std::set<int64_t> committed;
  for (const auto& c : ckpt::list_checkpoints(job_dir))
    if (c.manifest) committed.insert(c.step);
  EXPECT_EQ(committed, (std::set<int64_t>{4, 5}));

  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    auto t = sl::make_trainer(ctx);
    Checkpointer checkpoints(disk, ctx, options);
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->step, 5);
    EXPECT_TRUE(info->from_snapshot);
  }, {.same_machine = true});
  sl::expect_untouched(outside, sentinels);
  sl::expect_untouched(snapshot9, sentinels9);
  EXPECT_TRUE(fs::is_symlink(job_dir + "/step-00000009"));
  EXPECT_TRUE(fs::is_symlink(job_dir + "/step-00000001"));
}

// The job's directory in the snapshot base (a shared /dev/shm, say) is cohort's to name, not to
// find: one that is a link there already means no snapshots, with the reason, and nothing written.
TEST(CheckpointSymlinks, ASnapshotDirectoryThatIsALinkMeansNoSnapshots) {
  const std::string disk = checkpoint_test::fresh_dir("link_snapdir_disk");
  const std::string memory = checkpoint_test::fresh_dir("link_snapdir_memory");
  const fs::path outside = sl::outside_with_sentinels("link_snapdir_outside");
  const auto sentinels = sl::mark_sentinels(outside);
  std::string why_none;
  const std::string job_dir = ckpt::snapshot_dir_for(memory, disk, &why_none);
  ASSERT_FALSE(job_dir.empty()) << why_none;
  fs::create_directories(memory);
  fs::create_directory_symlink(outside, job_dir);
  EXPECT_EQ(ckpt::snapshot_dir_for(memory, disk, &why_none), "");
  EXPECT_NE(why_none.find(job_dir + " is a symbolic link to " + outside.string()), std::string::npos) << why_none;
  EXPECT_EQ(sl::train(disk, 3, {.snapshot_every_steps = 1, .snapshot_dir = memory}, 2), "");
  sl::expect_untouched(outside, sentinels);
  EXPECT_TRUE(fs::is_symlink(job_dir));
}
