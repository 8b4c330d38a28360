// Fault tolerance end to end (issue 5): the Fashion-MNIST example under `cohort run
// --max-restarts`, checkpointing every few steps, loses a worker to SIGKILL five times at random
// moments and still ends with parameters and momentum bitwise equal to an uninterrupted run; with
// --warm-spares, the processes started ahead of time take over after every kill, with the same result.
// No torch in this binary: it starts processes and reads their output.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "support/recovery_jobs.h"

namespace fs = std::filesystem;
using namespace cohort::testing;            // run_shell, contains, free_port, ... (support/subprocess.h)
using namespace cohort::testing::recovery;  // the example in the background, its workers (support/recovery_jobs.h)

namespace {

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
  // Each round waits for its spares to be loaded (2-3 s) before its kill: at 20 steps/s that is
  // ~60 steps a round, so three kills need more than kSteps.
  const std::string example_args = " --no-eval --threads 1 --log-every 0 --max-steps 400 --ckpt-every 7 --report-first-step";
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
