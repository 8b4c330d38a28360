// Fault tolerance end to end (issue 5): the Fashion-MNIST example under `cohort run
// --max-restarts`, checkpointing every few steps, loses a worker to SIGKILL five times at random
// moments and still ends with parameters and momentum bitwise equal to an uninterrupted run.
// No torch in this binary: it starts processes and reads their output.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "support/subprocess.h"

namespace fs = std::filesystem;
using cohort::testing::contains;
using cohort::testing::run_shell;

extern char** environ;

namespace {

const std::string kCohort = COHORT_CLI;
const std::string kExample = COHORT_FASHION_MNIST;

bool have_dataset() { return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good(); }

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string final_state(const std::string& output) {
  std::regex re("\"optimizer_checksum\":\"([0-9a-f]{16})\",\"param_checksum\":\"([0-9a-f]{16})\"");
  std::string out;
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    out += (*it)[1].str() + "/" + (*it)[2].str() + " ";
  return out;
}

// The job in the background with its output in a file.
struct Job {
  pid_t pid = -1;
  std::string log;
  Job(const std::string& command, const std::string& log_path) : log(log_path) {
    const std::string shell = command + " >" + log_path + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", shell.c_str(), nullptr};
    if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) pid = -1;
  }
  bool running() { return pid > 0 && ::waitpid(pid, &status_, WNOHANG) == 0; }
  int wait() {
    if (pid > 0 && ::waitpid(pid, &status_, 0) == pid) pid = -pid;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  ~Job() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  int status_ = 0;
};

// The pids of the job's workers (both ranks), found by their unique checkpoint directory.
std::vector<pid_t> worker_pids(const std::string& ckpt_dir) {
  std::vector<pid_t> out;
  // Anchored at the program's path: the launcher's and the shell's command lines contain it too.
  std::istringstream in(run_shell("pgrep -f -- '^" + kExample + " --ckpt-dir " + ckpt_dir + " '").output);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

// Whether a committed checkpoint exists (retention keeps the newest, so look for any).
bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (fs::exists(entry.path() / "manifest.json")) return true;
  return false;
}

TEST(Recovery, FiveSigkillsStillGiveTheUninterruptedRunsParametersBitwise) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_recovery_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 --max-steps 400 --ckpt-every 7 --report-first-step";
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 8 -- " + kExample;

  const auto straight = run_shell(run + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --ckpt-dir " + ckpt + example_args, (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  std::mt19937 rng(20261130);
  std::uniform_int_distribution<int> after_ms(200, 1200);
  int kills = 0;
  for (int start = 1; kills < 5 && job.running();) {
    // Wait until this start of the job trained (its first step is done), then kill at a random
    // moment: a random step, during or between checkpoint saves.
    // The first start also waits for its first checkpoint, so that every restart resumes.
    if (count(read_all(job.log), "first_step_unix_ns") < static_cast<size_t>(start) ||
        !has_checkpoint(ckpt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const auto pids = worker_pids(ckpt);
    if (pids.size() != 2 || !job.running()) continue;
    ::kill(pids[rng() % 2], SIGKILL);
    ++kills;
    ++start;
  }
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(kills, 5) << "the job ended before five kills; raise --max-steps: " << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "job succeeded after 5 restarts")) << output;
  EXPECT_EQ(count(output, "resumed from "), 5u) << output;  // every restart continued from a checkpoint
  EXPECT_EQ(final_state(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

}  // namespace
