// Fault tolerance end to end (issue 5): the Fashion-MNIST example under `cohort run
// --max-restarts`, checkpointing every few steps, loses a worker to SIGKILL five times at random
// moments and still ends with parameters and momentum bitwise equal to an uninterrupted run; with
// --warm-spares, the processes started ahead of time take over after every kill, with the same result.
// No torch in this binary: it starts processes and reads their output.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <regex>
#include <sstream>
#include <thread>

#include "support/subprocess.h"

namespace fs = std::filesystem;
using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)

extern char** environ;

namespace {

const std::string kExample = COHORT_FASHION_MNIST;
// Steps of every faulty run and its uninterrupted twin: enough for the faults to come before the
// end. Each start trains for a random 0.2-1.5 s after its first step before its fault, at most ~20
// steps of the CNN at >= 75 ms a step on this machine (fewer under load), so five faults need about
// 100; 160 leaves the margin without training the 400 steps these tests once took (CI time).
const std::string kSteps = "--max-steps 160";

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

// Sends `sig` to one of the job's two workers, chosen at random, `times` times: each time once the
// job's current start has trained (its first step is done) and `ready` says so, after a random
// [min_ms, max_ms] more — a random step, during or between saves. Returns the signals sent.
int signal_at_random_moments(Job& job, const std::string& ckpt, int sig, int times, unsigned seed, int min_ms,
                             int max_ms, const std::function<bool()>& ready = [] { return true; }) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> after_ms(min_ms, max_ms);
  int sent = 0;
  for (int start = 1; sent < times && job.running();) {
    if (count(read_all(job.log), "first_step_unix_ns") < static_cast<size_t>(start) || !ready()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const auto pids = worker_pids(ckpt);
    if (pids.size() != 2 || !job.running()) continue;
    ::kill(pids[rng() % 2], sig);
    ++sent;
    ++start;
  }
  return sent;
}

TEST(Recovery, FiveSigkillsStillGiveTheUninterruptedRunsParametersBitwise) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_recovery_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 " + kSteps + " --ckpt-every 7 --report-first-step";
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 8 -- " + kExample;

  const auto straight = run_shell(run + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --ckpt-dir " + ckpt + example_args, (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  // The first start also waits for its first checkpoint, so that every restart resumes.
  const int kills = signal_at_random_moments(job, ckpt, SIGKILL, 5, 20261130, 200, 1200, [&] { return has_checkpoint(ckpt); });
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(kills, 5) << "the job ended before five kills; raise --max-steps: " << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "job succeeded after 5 restarts")) << output;
  EXPECT_EQ(count(output, "resumed from "), 5u) << output;  // every restart continued from a checkpoint
  EXPECT_EQ(final_state(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

// Steps recomputed after each restore, from the run's event log: the newest step any rank
// reported before the restore, less the step restored. In the log's order (the agent writes each
// line as it hears of it; a round's workers are gone before the next round's restore).
std::vector<int64_t> steps_lost_per_restore(const std::string& events_path) {
  std::vector<int64_t> lost;
  int64_t newest = 0;
  const std::regex step("\"step\":(\\d+)");
  std::ifstream in(events_path);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, step)) continue;
    const int64_t s = std::stoll(m[1].str());
    if (contains(line, "\"type\":\"metrics\"")) newest = std::max(newest, s);
    if (contains(line, "\"kind\":\"checkpoint_restored\"")) lost.push_back(newest - s);
  }
  return lost;
}

// In-memory snapshots every step (issue 19): `faults` times a worker gets `sig` at a random moment
// (SIGSTOP: a hang, which --hang-timeout turns into a restart), no checkpoint on disk at all, and
// every restart resumes from a snapshot at most one step behind the newest step any rank reported;
// the job ends bitwise where an uninterrupted run (without snapshots) does.
void expect_snapshots_lose_at_most_one_step(int sig, int faults, const std::string& launcher_flags) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_snapshots_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 " + kSteps + " --report-first-step";
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 8 --no-dashboard" +
                          launcher_flags;

  const auto straight = run_shell(run + " -- " + kExample + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --run-dir " + (dir / "run").string() + " -- " + kExample + " --ckpt-dir " + ckpt +
              " --snapshot-every 1" + example_args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  const int sent = signal_at_random_moments(job, ckpt, sig, faults, 20261203, 300, 1500);
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(sent, faults) << "the job ended before the last fault; raise --max-steps: " << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "job succeeded after " + std::to_string(faults) + " restarts")) << output;
  EXPECT_EQ(count(output, "resumed from /dev/shm/cohort-snapshots-"), static_cast<size_t>(faults)) << output;
  EXPECT_FALSE(fs::exists(ckpt) && !fs::is_empty(ckpt)) << "no checkpoint on disk was asked for";
  const auto lost = steps_lost_per_restore((dir / "run" / "events.jsonl").string());
  ASSERT_EQ(lost.size(), static_cast<size_t>(faults)) << read_all((dir / "run" / "events.jsonl").string());
  for (size_t i = 0; i < lost.size(); ++i) {
    EXPECT_GE(lost[i], 0) << "restore " << i + 1;
    EXPECT_LE(lost[i], 1) << "restore " << i + 1 << " went back " << lost[i] << " steps";
  }
  // The hub's account of each recovery says the same: from a snapshot, at most one step lost.
  size_t recovered = 0;
  for (const auto& line : cohort::testing::lines(read_all((dir / "run" / "events.jsonl").string()))) {
    if (!contains(line, "\"kind\":\"recovered\"")) continue;
    ++recovered;
    EXPECT_TRUE(contains(line, "\"source\":\"snapshot\"")) << line;
    EXPECT_TRUE(contains(line, "\"steps_lost\":0") || contains(line, "\"steps_lost\":1")) << line;
  }
  EXPECT_EQ(recovered, static_cast<size_t>(faults));
  EXPECT_EQ(final_state(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  // The job's snapshot directory went with the job.
  std::smatch where;
  ASSERT_TRUE(std::regex_search(output, where, std::regex("resumed from (/dev/shm/cohort-snapshots-[^/]+)/"))) << output;
  EXPECT_FALSE(fs::exists(where[1].str())) << where[1].str() << " outlived its job";
  fs::remove_all(dir);
}

TEST(Recovery, SnapshotsEveryStepLoseAtMostOneStepPerSigkillWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_snapshots_lose_at_most_one_step(SIGKILL, 5, "");
}

TEST(Recovery, SnapshotsEveryStepLoseAtMostOneStepPerHangWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_snapshots_lose_at_most_one_step(SIGSTOP, 2, " --hang-timeout 3");
}

// Survivors keep running (issue 19, --keep-survivors): `faults` times one of the two workers gets
// `sig` at a random moment; the agent replaces it alone (a warm spare), the other worker re-forms
// the process groups and both resume from the newest in-memory snapshot. No full restart at all:
// the survivor of each fault keeps its pid, each recovery goes back at most one step, and the job
// ends bitwise where an uninterrupted run does.
// The job's training workers: those that mapped the shared-memory allreduce's segment
// (/dev/shm/cohort-<pid>-<n>), which the warm spares waiting in init() have not.
std::vector<pid_t> training_workers(const std::string& ckpt_dir) {
  std::vector<pid_t> out;
  const std::regex segment("/dev/shm/cohort-[0-9]+-[0-9]+");
  for (pid_t p : worker_pids(ckpt_dir))
    if (std::regex_search(read_all("/proc/" + std::to_string(p) + "/maps"), segment)) out.push_back(p);
  return out;
}

void expect_survivors_keep_running(int sig, int faults, const std::string& launcher_flags) {
  const fs::path dir = fs::temp_directory_path() / ("cohort_survivors_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 " + kSteps + " --report-first-step";
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 8 --no-dashboard" +
                          launcher_flags;
  const auto straight = run_shell(run + " -- " + kExample + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --keep-survivors --warm-spares --run-dir " + (dir / "run").string() + " -- " + kExample +
              " --ckpt-dir " + ckpt + " --snapshot-every 1" + example_args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<int> after_ms(200, 1000);
  std::vector<pid_t> survivors;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(4);
  for (int fault = 0; fault < faults && job.running() && std::chrono::steady_clock::now() < deadline;) {
    // The job trains again after the last fault (rank 0 printed one more first step).
    if (count(read_all(job.log), "first_step_unix_ns") < static_cast<size_t>(fault + 1)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const std::vector<pid_t> training = training_workers(ckpt);
    if (training.size() != 2 || !job.running()) continue;
    // The survivor of the last fault trains on as the same process.
    if (!survivors.empty())
      EXPECT_NE(std::find(training.begin(), training.end(), survivors.back()), training.end())
          << "survivor " << survivors.back() << " of fault " << fault << " is gone";
    const size_t victim = rng() % 2;
    ::kill(training[victim], sig);
    survivors.push_back(training[1 - victim]);
    ++fault;
  }
  while (job.running() && count(read_all(job.log), "first_step_unix_ns") < static_cast<size_t>(faults + 1))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (job.running() && !survivors.empty()) {
    const auto training = training_workers(ckpt);
    EXPECT_NE(std::find(training.begin(), training.end(), survivors.back()), training.end())
        << "survivor " << survivors.back() << " of the last fault is gone";
  }
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(survivors.size(), static_cast<size_t>(faults)) << "the job ended before the last fault: " << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_EQ(count(output, "while the other ranks keep running"), static_cast<size_t>(faults)) << output;
  EXPECT_FALSE(contains(output, "restarting the job")) << "a full restart happened:\n" << output;
  EXPECT_EQ(count(output, "a collective failed"), static_cast<size_t>(faults)) << output;
  const auto events = read_all((dir / "run" / "events.jsonl").string());
  const auto lost = steps_lost_per_restore((dir / "run" / "events.jsonl").string());
  ASSERT_EQ(lost.size(), static_cast<size_t>(faults)) << events;
  for (size_t i = 0; i < lost.size(); ++i) EXPECT_LE(lost[i], 1) << "recovery " << i + 1 << " went back " << lost[i] << " steps";
  size_t recovered = 0;
  for (const auto& line : cohort::testing::lines(events)) {
    if (!contains(line, "\"kind\":\"recovered\"")) continue;
    ++recovered;
    EXPECT_TRUE(contains(line, "\"source\":\"snapshot\"")) << line;
  }
  EXPECT_EQ(recovered, static_cast<size_t>(faults));
  EXPECT_EQ(final_state(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

// What a rank's result line says about the training, without its timings: steps, loss, accuracy
// and the checksums, one line per rank.
std::string results_without_timings(const std::string& output) {
  std::string out;
  std::regex steps("\"steps\":(\\d+)"), loss("\"final_loss\":([^,]+)"), accuracy("\"test_accuracy\":([^,]+)");
  for (const auto& line : cohort::testing::lines(output)) {
    if (line.find("\"param_checksum\"") == std::string::npos) continue;
    std::smatch a, b, c;
    if (!std::regex_search(line, a, steps) || !std::regex_search(line, b, loss) || !std::regex_search(line, c, accuracy))
      continue;
    out += a[1].str() + " " + b[1].str() + " " + c[1].str() + " " + final_state(line) + "\n";
  }
  return out;
}

// A failure after the last checkpoint — during the final evaluation, or after the final save —
// restarts the job at its end (issue 22): it trains no step more than --max-steps and reports
// the uninterrupted run's loss, accuracy and state, whether that last save was a periodic one
// (20, every 10) or the end-of-job save (25).
TEST(Recovery, ResumingAtTheLastCheckpointGivesTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_resume_end_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (const char* max_steps : {"20", "25"}) {
    SCOPED_TRACE(std::string("--max-steps ") + max_steps);
    const std::string ckpt = (dir / max_steps).string();
    const std::string job = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 -- " + kExample +
                            " --model mlp --threads 1 --log-every 0 --ckpt-every 10 --ckpt-dir " + ckpt +
                            " --max-steps " + max_steps;
    const auto first = run_shell(job);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string expected = results_without_timings(first.output);
    ASSERT_EQ(count(expected, "\n"), 2u) << first.output;
    EXPECT_EQ(expected.substr(0, expected.find(' ')), max_steps) << expected;
    const auto again = run_shell(job);  // as a restart after a failure at the very end would
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_TRUE(contains(again.output, "resumed from " + ckpt + "/step-000000" + max_steps)) << again.output;
    EXPECT_EQ(results_without_timings(again.output), expected) << again.output;
  }
  fs::remove_all(dir);
}

// PowerSGD's state (error feedback, Qs, step count) is in every checkpoint, per rank: a job that
// goes back to the checkpoint of step 20 ends bitwise where the uninterrupted one did (a hook
// restarted from nothing would allreduce plainly for 5 steps and compress afresh: see
// CommHookCheckpoint.PowerSGDResumesBitwiseWithItsErrorsAndQs for that it then differs).
TEST(Recovery, PowerSGDResumesFromACheckpointWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_resume_powersgd_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string job = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 -- " + kExample +
                          " --model mlp --threads 1 --log-every 0 --comm-hook powersgd --powersgd-rank 2"
                          " --powersgd-start 5 --ckpt-every 10 --ckpt-dir " + dir.string() + " --max-steps 30";
  const auto first = run_shell(job);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string expected = results_without_timings(first.output);
  ASSERT_EQ(count(expected, "\n"), 2u) << first.output;
  ASSERT_TRUE(fs::exists(dir / "step-00000020" / "rank-00001-of-00002.safetensors"));
  fs::remove_all(dir / "step-00000030");  // as if the job had failed before its last save
  const auto again = run_shell(job);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "resumed from " + (dir / "step-00000020").string())) << again.output;
  EXPECT_EQ(results_without_timings(again.output), expected) << again.output;
  fs::remove_all(dir);
}

// A process's environment variable as it was started (empty when unset or the process is gone).
std::string started_with(pid_t pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
  for (std::string entry; std::getline(in, entry, '\0');)
    if (entry.rfind(name + "=", 0) == 0) return entry.substr(name.size() + 1);
  return "";
}

// The example's processes for this checkpoint directory by the round they were started for: the
// round's workers and, with --warm-spares, the next round's standby workers.
std::map<int, std::set<pid_t>> processes_by_round(const std::string& ckpt_dir) {
  std::map<int, std::set<pid_t>> out;
  for (pid_t p : worker_pids(ckpt_dir)) {
    const std::string round = started_with(p, "COHORT_RESTART_COUNT");
    if (!round.empty()) out[std::stoi(round)].insert(p);
  }
  return out;
}

// Whether a standby worker waits in cohort::init(): its link socket exists (it binds it there,
// then sends the heartbeat that tells the agent its address, then waits).
bool waiting_in_init(pid_t pid, const fs::path& runtime_dir) {
  std::error_code ec;
  for (const auto& run : fs::directory_iterator(runtime_dir, ec))
    if (fs::exists(run.path() / ("w" + std::to_string(pid) + ".sock"))) return true;
  return false;
}

TEST(Recovery, WarmSparesTakeOverAfterEachSigkillWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_warm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "xdg");
  const std::string example_args = " --no-eval --threads 1 --log-every 0 " + kSteps + " --ckpt-every 7 --report-first-step";
  // The agent's run directory (the worker sockets) goes under xdg/, where the test can see it.
  const std::string run = "XDG_RUNTIME_DIR=" + (dir / "xdg").string() + " " + kCohort +
                          " run -v --nproc-per-node 2 --threads-per-proc 1 --max-restarts 3 --warm-spares -- " + kExample;

  const auto straight = run_shell(run + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = final_state(straight.output);
  ASSERT_EQ(expected.size(), 2 * 34u) << straight.output;
  EXPECT_FALSE(contains(straight.output, "warm spares as")) << "no failure, so no spare may have been used";

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --ckpt-dir " + ckpt + example_args, (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  std::mt19937 rng(20261130);
  std::uniform_int_distribution<int> after_ms(100, 600);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(4);
  for (int round = 0; round < 3; ++round) {
    // This round trains, has checkpointed, and the next round's two spares wait in init().
    std::set<pid_t> spares;
    while (job.running() && std::chrono::steady_clock::now() < deadline) {
      auto by_round = processes_by_round(ckpt);
      spares = by_round[round + 1];
      bool waiting = spares.size() == 2;
      for (pid_t p : spares) waiting = waiting && waiting_in_init(p, dir / "xdg");
      if (waiting && by_round[round].size() == 2 && has_checkpoint(ckpt) &&
          count(read_all(job.log), "first_step_unix_ns") > static_cast<size_t>(round))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(job.running()) << "the job ended before kill " << round + 1 << ": " << read_all(job.log);
    for (pid_t p : spares) EXPECT_EQ(started_with(p, "COHORT_STANDBY"), "1");
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const auto workers = processes_by_round(ckpt)[round];
    ASSERT_EQ(workers.size(), 2u) << read_all(job.log);
    ::kill(*std::next(workers.begin(), static_cast<long>(rng() % 2)), SIGKILL);
    // The next round's workers are exactly the spares that stood by.
    while (count(read_all(job.log), "first_step_unix_ns") <= static_cast<size_t>(round + 1) && job.running() &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::set<pid_t> next = processes_by_round(ckpt)[round + 1];
    EXPECT_EQ(next, spares) << "round " << round + 1 << " was not run by the warm spares: " << read_all(job.log);
  }
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "job succeeded after 3 restarts")) << output;
  EXPECT_EQ(count(output, "released its warm spares as ranks 0..1"), 3u) << output;
  EXPECT_EQ(count(output, "resumed from "), 3u) << output;
  EXPECT_EQ(final_state(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

}  // namespace

namespace {
TEST(Recovery, SurvivorsKeepRunningThroughFiveSigkillsWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_survivors_keep_running(SIGKILL, 5, "");
}

TEST(Recovery, SurvivorsKeepRunningThroughHangsWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_survivors_keep_running(SIGSTOP, 2, " --hang-timeout 3");
}
}  // namespace
