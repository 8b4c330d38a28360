// Checkpoints with real processes: SIGKILL at random moments of saving (50 trials), a full disk,
// an independent safetensors reader, the `cohort ckpt` command, and the Fashion-MNIST example
// resuming bit for bit. The probe program is ckpt_probe.cpp; this binary has no torch and reads
// checkpoints with cohort's format library only.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/format/safetensors.h"
#include "support/subprocess.h"

namespace fs = std::filesystem;
using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)
namespace ckpt = cohort::ckpt;

extern char** environ;

namespace {

const std::string kProbe = CKPT_PROBE;
const std::string kExample = COHORT_FASHION_MNIST;
const std::string kReader = READ_SAFETENSORS_PY;

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cohort_ckpt_proc_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// True when every value of tensor `name` in a safetensors file equals `value` (F32).
bool all_values_equal(const std::string& file, const std::string& name, float value) {
  const auto header = ckpt::read_header(file);
  std::ifstream in(file, std::ios::binary);
  for (const auto& t : header.tensors) {
    if (t.name != name) continue;
    std::vector<float> values((t.end - t.begin) / sizeof(float));
    in.seekg(static_cast<std::streamoff>(header.data_start + t.begin));
    in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(t.end - t.begin));
    for (float v : values)
      if (v != value) return false;
    return !values.empty();
  }
  return false;
}

// --- crash safety --------------------------------------------------------------------------------

// The newest committed step in `dir`, or -1.
int64_t newest_committed(const std::string& dir) {
  for (const auto& c : ckpt::list_checkpoints(dir))
    if (c.manifest) return c.step;
  return -1;
}

TEST(CheckpointCrash, FiftySigkillsDuringSavesNeverLeaveAPartialCheckpoint) {
  const std::string dir = fresh_dir("crash");
  const std::string log = dir + ".log";
  std::mt19937 rng(20261130);
  std::uniform_int_distribution<int> delay_us(0, 150000);
  int64_t newest_before = -1;  // the newest committed step after the previous trial
  for (int trial = 0; trial < 50; ++trial) {
    const bool async = trial % 2 == 1;
    const int us = delay_us(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + (async ? " (async)" : " (sync)") + ", killed " +
                 std::to_string(us / 1000) + " ms after a new commit");
    // 1M floats: 4 MB of parameters and 4 MB of momentum per save, fsynced, back to back.
    const std::string command = "exec " + kProbe + " --dir " + dir + " --mode loop --floats 1048576 --keep 2" +
                                (async ? " --async" : "") + " >" + log + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    // Kill at a random moment of the save loop, once this start has committed a new checkpoint
    // (so that every trial kills a process that is saving, however slowly it started).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (newest_committed(dir) <= newest_before && std::chrono::steady_clock::now() < give_up &&
           ::waitpid(pid, nullptr, WNOHANG) == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string output = run_shell("cat " + log).output;
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the probe ended on its own: " << output;
    // The probe restored what the previous trial left as newest, and found it complete (it exits
    // with "INCOMPLETE" otherwise).
    const std::string expected = newest_before < 0 ? "restored none" : "restored " + std::to_string(newest_before);
    EXPECT_TRUE(contains(output, expected + "\n")) << output;
    // Every committed checkpoint verifies and holds the values of its step: never a partial one.
    for (const auto& c : ckpt::list_checkpoints(dir)) {
      if (!c.manifest) continue;
      EXPECT_EQ(ckpt::verify_checkpoint(c.path), "") << c.path;
      for (const auto& entry : fs::directory_iterator(c.path))  // no leftovers of a killed writer
        EXPECT_FALSE(contains(entry.path().filename().string(), ".tmp-")) << entry.path();
      EXPECT_TRUE(all_values_equal(c.path + "/model.safetensors", "w", static_cast<float>(c.step))) << c.path;
      EXPECT_TRUE(all_values_equal(c.path + "/optimizer.safetensors", "w/momentum_buffer", -static_cast<float>(c.step)))
          << c.path;
    }
    const int64_t newest = newest_committed(dir);
    ASSERT_GT(newest, newest_before) << "no new commit, or a committed checkpoint was lost: " << output;
    newest_before = newest;
  }
  // And a last, unkilled start restores the newest.
  const auto last = run_shell(kProbe + " --dir " + dir + " --mode steps --steps 0 --floats 1048576");
  EXPECT_TRUE(contains(last.output, "restored " + std::to_string(newest_before) + "\n")) << last.output;
}

// --- a normal exit finishes the save in flight ------------------------------------------------------

TEST(CheckpointExit, ExitWithAnAsyncSaveInFlightCommitsIt) {
  const std::string dir = fresh_dir("exit");
  const auto r = run_shell(kProbe + " --dir " + dir + " --mode steps --steps 3 --async --floats 4194304 --exit-at-once");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(contains(r.output, "exit() with a save in flight")) << r.output;
  const auto listed = ckpt::list_checkpoints(dir);
  ASSERT_FALSE(listed.empty());
  EXPECT_EQ(listed.front().step, 3);
  EXPECT_EQ(ckpt::verify_checkpoint(listed.front().path), "");
}

// --- a full disk ----------------------------------------------------------------------------------

bool can_mount() { return run_shell("unshare -m true").exit_code == 0; }

// Mounts `fs` on `dir` in a private mount namespace and runs `commands` there: tmpfs of 12 MiB, or
// a 16 MiB ext4 image on a loop device (the O_DIRECT path on a real block file system; tmpfs takes
// O_DIRECT too since Linux 6.6), or ramfs, which refuses O_DIRECT (the page-cache path).
cohort::testing::Run run_mounted(const std::string& fs, const std::string& dir, const std::string& commands) {
  if (fs == "tmpfs") return run_shell("unshare -m sh -c 'mount -t tmpfs -o size=12m tmpfs " + dir + " && " + commands + "'");
  if (fs == "ramfs") return run_shell("unshare -m sh -c 'mount -t ramfs ramfs " + dir + " && " + commands + "'");
  const std::string image = dir + ".ext4";
  auto r = run_shell("rm -f " + image + " && truncate -s 16M " + image + " && mkfs.ext4 -q -F " + image +
                     " && unshare -m sh -c 'mount -o loop " + image + " " + dir + " && rmdir " + dir +
                     "/lost+found && " + commands + "'; rm -f " + image);
  return r;
}

bool can_mount_ext4() {
  const std::string dir = fresh_dir("ext4_probe");
  return can_mount() && run_mounted("ext4", dir, "true").exit_code == 0;
}

class CheckpointFullDisk : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(CheckpointFullDisk, SaveFailsClearlyLeavesNothingPartialAndTrainingCarriesOn) {
  const auto& [filesystem, async] = GetParam();
  const std::string dir = fresh_dir("full_disk_" + filesystem + (async ? "_async" : "_sync"));
  const std::string probe = kProbe + " --dir " + dir + "/ck --mode steps --steps 3 --floats 1048576 --keep 5" +
                            (async ? " --async" : "");
  // Step 1's checkpoint (8 MB) fits; step 2's does not, and step 1's may not be deleted for it.
  const std::string checks = "; echo files:; find " + dir + " -type f | sort; " + kCohort + " ckpt verify " + dir +
                             "/ck/step-00000001";
  if (can_mount() && (filesystem == "tmpfs" || can_mount_ext4())) {
    const auto r = run_mounted(filesystem, dir, probe + checks);
    EXPECT_TRUE(contains(r.output, "step-00000002/")) << r.output;
    EXPECT_TRUE(contains(r.output, ": No space left on device")) << r.output;
    EXPECT_TRUE(contains(r.output, "nothing was committed")) << r.output;
    EXPECT_TRUE(contains(r.output, "trained to step 3")) << r.output;  // training carried on
    EXPECT_TRUE(contains(r.output, "step-00000001: valid")) << r.output;
    const std::string files = r.output.substr(std::min(r.output.size(), r.output.find("files:")));
    EXPECT_FALSE(contains(files, "step-00000002")) << "a file of the failed save is left: " << files;
    EXPECT_FALSE(contains(files, ".tmp-")) << files;
    EXPECT_EQ(r.exit_code, 0) << r.output;
  } else if (filesystem == "tmpfs") {
    // No mount namespace here: a per-file size limit plays the full disk (EFBIG instead of ENOSPC).
    const auto r = run_shell("prlimit --fsize=2000000 " + probe + " --ignore-sigxfsz; ls -R " + dir);
    EXPECT_TRUE(contains(r.output, "File too large")) << r.output;
    EXPECT_TRUE(contains(r.output, "trained to step 3")) << r.output;
    EXPECT_FALSE(contains(r.output, "manifest.json")) << r.output;
    EXPECT_FALSE(contains(r.output, ".tmp-")) << r.output;
  } else {
    GTEST_SKIP() << "no mount namespace or loop device here: the ext4 case needs both";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CheckpointFullDisk,
                         ::testing::Combine(::testing::Values("tmpfs", "ext4"), ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_async" : "_sync");
                         });

// Snapshots copy the tensors straight into their files' mapped pages (mapped_files.h). On a full
// file system that must be a clear error and training that goes on — never a SIGBUS at a write
// into a page that could not be had: 12 MiB hold step 1's snapshot (8 MiB), not step 2's, and the
// snapshot of step 1 stays whole. On ext4 (a disk) the same, through the page cache.
class SnapshotFullDisk : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotFullDisk, ASnapshotThatDoesNotFitFailsClearlyAndTheOneBeforeStaysWhole) {
  const std::string filesystem = GetParam();
  if (!can_mount() || (filesystem == "ext4" && !can_mount_ext4()))
    GTEST_SKIP() << "no mount namespace or loop device here";
  const std::string dir = fresh_dir("snapshot_full_" + filesystem);
  const auto r = run_mounted(filesystem, dir,
                             kProbe + " --dir " + dir + "-disk --snapshot-dir " + dir + " --mode steps --steps 3 " +
                                 "--floats 1048576; echo exit $?; echo files:; find " + dir + " -type f | sort; " +
                                 "for s in " + dir + "/*/step-00000001; do " + kCohort + " ckpt verify $s; done");
  fs::remove_all(dir + "-disk");
  EXPECT_TRUE(contains(r.output, "exit 0")) << r.output;  // no SIGBUS
  // Steps 2 and 3 each tried theirs (a failed snapshot does not cost the next one as well).
  EXPECT_EQ(count(r.output, "in-memory snapshot failed (training continues)"), 2u) << r.output;
  EXPECT_TRUE(contains(r.output, ": No space left on device")) << r.output;
  EXPECT_TRUE(contains(r.output, "trained to step 3")) << r.output;
  EXPECT_TRUE(contains(r.output, "step-00000001: valid")) << r.output;
  const std::string files = r.output.substr(std::min(r.output.size(), r.output.find("files:")));
  EXPECT_FALSE(contains(files, "step-00000002")) << "a file of the failed snapshot is left: " << files;
  EXPECT_FALSE(contains(files, ".tmp-")) << files;
}

INSTANTIATE_TEST_SUITE_P(FileSystems, SnapshotFullDisk, ::testing::Values("tmpfs", "ext4"),
                         [](const auto& info) { return info.param; });

// Where the file system refuses O_DIRECT (ramfs), checkpoints go through the page cache: saved,
// verified and restored all the same.
TEST(CheckpointNoDirectIo, SavesAndRestoresThroughThePageCache) {
  if (!can_mount()) GTEST_SKIP() << "no mount namespace here";
  const std::string dir = fresh_dir("ramfs");
  const auto r = run_mounted("ramfs", dir,
                             "dd if=/dev/zero of=" + dir + "/x bs=4096 count=1 oflag=direct 2>/dev/null && echo O_DIRECT-taken; " +
                             kProbe + " --dir " + dir + "/ck --mode steps --steps 2 --floats 65536 && " + kProbe +
                             " --dir " + dir + "/ck --mode steps --steps 4 --floats 65536 && " + kCohort + " ckpt verify " +
                             dir + "/ck/step-00000004");
  EXPECT_FALSE(contains(r.output, "O_DIRECT-taken")) << "ramfs took O_DIRECT: this test no longer covers the page-cache path";
  EXPECT_TRUE(contains(r.output, "restored 2\n")) << "the second start resumed from the first's checkpoint:\n" << r.output;
  EXPECT_TRUE(contains(r.output, "trained to step 4")) << r.output;
  EXPECT_TRUE(contains(r.output, "step-00000004: valid")) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// --- Python reads the weights; `cohort ckpt` lists, verifies and inspects ---------------------------

TEST(CheckpointFormat, AnIndependentSafetensorsReaderSeesTheModelsValues) {
  const std::string dir = fresh_dir("export");
  const auto e = run_shell(kProbe + " --dir " + dir + " --mode export");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto r = run_shell("python3 " + kReader + " " + dir + "/step-00000005/model.safetensors " + dir + "/expected.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ok: 5 tensors equal")) << r.output;
}

// PyTorch users' own reader: Python's safetensors package (in the torch 2.x build's venv, whose
// Python the CMake variable COHORT_PYTHON names there; Debian 12 packages no safetensors).
TEST(CheckpointFormat, PythonsSafetensorsPackageLoadsTheModelsValues) {
  const char* python = std::getenv("COHORT_PYTHON");
  if (!python || run_shell(std::string(python) + " -c 'import safetensors.torch'").exit_code != 0) {
    GTEST_SKIP() << "the Python at COHORT_PYTHON (" << (python ? python : "unset")
                 << ") has no safetensors package; scripts/test-torch2.sh runs this with its venv's";
  }
  const std::string dir = fresh_dir("export-package");
  const auto e = run_shell(kProbe + " --dir " + dir + " --mode export");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto r = run_shell(std::string(python) + " " + kReader + " --package " + dir +
                           "/step-00000005/model.safetensors " + dir + "/expected.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ok: 5 tensors equal (safetensors package)")) << r.output;
  EXPECT_TRUE(contains(r.output, "'writer': 'cohort'")) << r.output;  // the file's own metadata
}

TEST(CheckpointCli, ListVerifyInspect) {
  const std::string dir = fresh_dir("cli");
  ASSERT_EQ(run_shell(kProbe + " --dir " + dir + " --mode export").exit_code, 0);
  const std::string ck = dir + "/step-00000005";
  fs::create_directories(dir + "/step-00000009");  // an interrupted save

  auto list = run_shell(kCohort + " ckpt list " + dir);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(std::regex_search(list.output, std::regex("step-00000009 +9 .*not a checkpoint: no manifest.json"))) << list.output;
  EXPECT_TRUE(std::regex_search(list.output, std::regex("step-00000005 +5 +0 +1 "))) << list.output;

  auto inspect = run_shell(kCohort + " ckpt inspect " + ck);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "step        5\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "world size  1\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "  weight  F32 [3, 4]\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "  steps  I64 [3]\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "  purpose = interop test\n")) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "\"type\":\"Adam\"")) << inspect.output;

  EXPECT_EQ(run_shell(kCohort + " ckpt verify " + ck).exit_code, 0);
  {  // one flipped bit in the last tensor's data
    std::fstream f(ck + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x04));
  }
  auto bad = run_shell(kCohort + " ckpt verify " + ck);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.output, "is NOT valid: model.safetensors: checksum mismatch")) << bad.output;
  auto missing = run_shell(kCohort + " ckpt verify " + dir + "/step-00000009");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.output, "no manifest.json")) << missing.output;
  auto usage = run_shell(kCohort + " ckpt verify");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_TRUE(contains(usage.output, "PATH is required")) << usage.output;
}

// A step directory that is a symbolic link to a valid checkpoint outside the folder (issue 50) is
// no checkpoint for list, verify and inspect, with the reason; nothing of its target is read.
TEST(CheckpointCli, ALinkedStepIsNotACheckpoint) {
  const std::string dir = fresh_dir("cli_link"), outside = fresh_dir("cli_link_outside");
  ASSERT_EQ(run_shell(kProbe + " --dir " + outside + " --mode export").exit_code, 0);
  const std::string target = outside + "/step-00000005";
  ASSERT_EQ(run_shell(kCohort + " ckpt verify " + target).exit_code, 0);
  fs::create_directory_symlink(target, dir + "/step-00000005");
  const std::string old_access = "touch -a -d 2001-09-09 " + target + "/*; ";  // read: a new access time
  const std::string accessed = "; find " + target + " -type f -newerat 2002-01-01";

  auto list = run_shell(old_access + kCohort + " ckpt list " + dir + accessed);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(std::regex_search(list.output, std::regex("step-00000005 +5 .*not a checkpoint: a symbolic link to " + target)))
      << list.output;
  EXPECT_FALSE(contains(list.output, target + "/")) << "read through the link: " << list.output;
  auto json = run_shell(kCohort + " ckpt list --json " + dir);
  EXPECT_TRUE(contains(json.output, "\"committed\": false")) << json.output;

  for (const std::string path : {dir + "/step-00000005", dir + "/step-00000005/"}) {
    auto verify = run_shell(old_access + kCohort + " ckpt verify " + path + accessed);
    EXPECT_EQ(verify.exit_code, 0) << verify.output;  // find's status; the command's is below
    EXPECT_TRUE(contains(verify.output, "is NOT valid: a symbolic link to " + target)) << verify.output;
    EXPECT_FALSE(contains(verify.output, target + "/")) << "read through the link: " << verify.output;
    EXPECT_EQ(run_shell(kCohort + " ckpt verify " + path).exit_code, 1);
  }
  auto inspect = run_shell(kCohort + " ckpt inspect " + dir + "/step-00000005");
  EXPECT_EQ(inspect.exit_code, 1) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "a symbolic link to " + target)) << inspect.output;
  EXPECT_EQ(run_shell(kCohort + " ckpt verify " + target).exit_code, 0);  // the target itself is untouched
}

// 100,000 nested arrays (200 KB) in a manifest's "sampler" or a safetensors header's
// "__metadata__" overflowed the stack of `cohort ckpt` (SIGSEGV, issue 50): one line now.
TEST(CheckpointCli, JsonNestedTooDeepIsOneLineNotACrash) {
  const std::string dir = fresh_dir("cli_deep");
  ASSERT_EQ(run_shell(kProbe + " --dir " + dir + " --mode export").exit_code, 0);
  const std::string ck = dir + "/step-00000005", deep = std::string(100000, '[') + std::string(100000, ']');
  const auto read_all = [](const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto write_all = [](const std::string& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  };
  // The model file's header with a deep "__metadata__" in front of its entries; data unmoved.
  const std::string model = read_all(ck + "/model.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(model[i]);
  const std::string header = "{\"__metadata__\":{\"x\":" + deep + "}," + model.substr(9, n - 1);
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_all(ck + "/model.safetensors", length + header + model.substr(8 + n));
  auto inspect = run_shell(kCohort + " ckpt inspect --json " + ck);
  EXPECT_EQ(inspect.exit_code, 1) << inspect.output.substr(0, 2000);
  EXPECT_TRUE(contains(inspect.output, "header is nested deeper than 64 levels")) << inspect.output.substr(0, 2000);

  const std::string manifest = read_all(ck + "/manifest.json");
  const auto at = manifest.find("\"sampler\": null");
  ASSERT_NE(at, std::string::npos) << manifest;
  write_all(ck + "/manifest.json", manifest.substr(0, at) + "\"sampler\": {\"x\": " + deep + "}" + manifest.substr(at + 15));
  const std::string expected = "manifest.json is nested deeper than 64 levels";
  auto verify = run_shell(kCohort + " ckpt verify " + ck);
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_EQ(verify.output, "cohort ckpt verify: " + ck + " is NOT valid: " + expected + "\n");
  auto list = run_shell(kCohort + " ckpt list " + dir);
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(std::regex_search(list.output, std::regex("step-00000005 +5 .*not a checkpoint: " + expected))) << list.output;
  auto json = run_shell(kCohort + " ckpt list --json " + dir);
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_TRUE(contains(json.output, expected)) << json.output;
  auto inspect_manifest = run_shell(kCohort + " ckpt inspect " + ck);
  EXPECT_EQ(inspect_manifest.exit_code, 1) << inspect_manifest.output;
  EXPECT_TRUE(contains(inspect_manifest.output, expected)) << inspect_manifest.output;
}

// --- the example resumes exactly, through processes -------------------------------------------------

bool have_dataset() { return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good(); }

std::string final_state(const std::string& output) {
  std::smatch m;
  std::regex re("\"optimizer_checksum\":\"([0-9a-f]{16})\",\"param_checksum\":\"([0-9a-f]{16})\"");
  std::string out;
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    out += (*it)[1].str() + "/" + (*it)[2].str() + " ";
  return out;
}

class ExampleResume : public ::testing::TestWithParam<bool> {};

TEST_P(ExampleResume, StopAndResumeEqualsOneRunBitwise) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const bool sync = GetParam();
  const std::string dir = fresh_dir(std::string("example") + (sync ? "_sync" : "_async"));
  const std::string run = kCohort + " run --nproc-per-node 2 -- " + kExample +
                          " --no-eval --threads 1 --log-every 0 --ckpt-every 15" + (sync ? " --ckpt-sync" : "");
  const auto straight = run_shell(run + " --max-steps 50 --ckpt-dir " + dir + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto first = run_shell(run + " --max-steps 25 --ckpt-dir " + dir + "/resumed");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_shell(run + " --max-steps 50 --ckpt-dir " + dir + "/resumed");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  // The first run saved at steps 15 and 25 (its end).
  EXPECT_TRUE(contains(second.output, "resumed from " + dir + "/resumed/step-00000025 (step 25")) << second.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;  // both ranks
  EXPECT_EQ(final_state(second.output), expected) << "parameters or momentum differ from the uninterrupted run";
}

INSTANTIATE_TEST_SUITE_P(Modes, ExampleResume, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "sync" : "async"; });

}  // namespace
