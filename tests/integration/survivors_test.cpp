// Survivors keep running (issue 19): under `cohort run --keep-survivors` a killed or hung worker is
// replaced alone and the other re-forms its process groups around the replacement; and where a
// worker cannot rejoin, the round restarts as before. The Fashion-MNIST example, real processes.
#include <gtest/gtest.h>

#include <chrono>
#include <iterator>
#include <map>
#include <thread>

#include "runtime/host/cpu_priority.h"
#include "support/recovery_jobs.h"

namespace fs = std::filesystem;
using namespace cohort::testing;
using namespace cohort::testing::recovery;

namespace {

// Survivors keep running (issue 19, --keep-survivors): `faults` times one of the two workers gets
// `sig` at a random moment; the agent replaces it alone (a warm spare), the other worker re-forms
// the process groups and both resume from the newest in-memory snapshot. No full restart at all:
// the survivor of each fault keeps its pid, each recovery goes back at most one step, and the job
// ends bitwise where an uninterrupted run does.
// The ranks' final states, in either order (local SGD's ranks each print their own).
std::vector<std::string> sorted_states(const std::string& output) {
  std::istringstream in(final_state(output));
  std::vector<std::string> v{std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
  std::sort(v.begin(), v.end());
  return v;
}

void expect_survivors_keep_running(int sig, int faults, const std::string& launcher_flags,
                                   const std::string& example_flags = "") {
  const fs::path dir = fs::temp_directory_path() / ("cohort_survivors_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args =
      " --no-eval --threads 1 --log-every 0 " + kSteps + " --report-first-step" + example_flags;
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 8 --no-dashboard" +
                          launcher_flags;
  const auto straight = run_shell(run + " -- " + kExample + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto expected = sorted_states(straight.output);
  ASSERT_EQ(expected.size(), 2u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --keep-survivors --warm-spares --run-dir " + (dir / "run").string() + " -- " + kExample +
              " --ckpt-dir " + ckpt + " --snapshot-every 1" + example_args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<int> after_ms(200, 1000);
  std::vector<pid_t> survivors;
  // Spares load at the lowest priority where they can come back (runtime/host/cpu_priority.h);
  // every thread that trains runs at the job's, and a snapshot's writer at the lowest.
  const int own_nice = cohort::detail::this_thread_nice();
  const bool spares_low = own_nice < cohort::detail::kBackgroundNice && cohort::detail::can_return_to_nice(own_nice);
  int low_spares_seen = 0;
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
    for (pid_t p : training) {
      for (const auto& [tid, t] : thread_nices(p))
        EXPECT_EQ(t.nice, t.name == "cohort-snapshot" ? cohort::detail::kBackgroundNice : own_nice)
            << "thread " << tid << " (" << t.name << ") of worker " << p << " before fault " << fault;
    }
    for (pid_t p : worker_pids(ckpt)) {  // a spare released just now may be at the job's already
      const auto threads = thread_nices(p);
      if (std::find(training.begin(), training.end(), p) == training.end() && threads.count(p))
        low_spares_seen += threads.at(p).nice == cohort::detail::kBackgroundNice;
    }
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
  if (spares_low) EXPECT_GT(low_spares_seen, 0) << "no warm spare was seen loading or waiting at nice 19";
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
  if (sig == SIGSTOP) {  // each hang: the survivor's flight record, written before the repair
    for (int g = 1; g <= faults; ++g) {
      std::smatch m;
      const std::regex line("flight records of round 0 before generation " + std::to_string(g) + ": (/[^ ,;\n]+-gen" +
                            std::to_string(g) + "-rank[0-9]+\\.json)\n");
      ASSERT_TRUE(std::regex_search(output, m, line)) << output;
      const std::string records = read_all(m[1].str());
      EXPECT_EQ(count(records, "\"format\": \"cohort-flight-record\""), 1u) << "generation " << g << ":\n" << output;
      EXPECT_TRUE(contains(records, "made no progress")) << records;
    }
  }
  EXPECT_EQ(sorted_states(output), expected) << "parameters or momentum differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

TEST(Recovery, SurvivorsKeepRunningThroughFiveSigkillsWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_survivors_keep_running(SIGKILL, 5, "");
}

// Four ranks over Gloo alone (no shared-memory allreduce): the ring's far side (rank 0 when rank 2
// dies) waits on survivors, not on the dead rank. The survivors let go of the old group before
// re-forming, which closes their connections, so rank 0's wait fails too and it rejoins; the job
// ends bitwise where an uninterrupted run does, without a full restart.
TEST(Recovery, FourRanksOnGlooRejoinWhenTheRingsFarSideWaitedOnASurvivor) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_ring_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 --max-steps 600 --batch-size 32 --report-first-step";
  const std::string run = "COHORT_SHM=0 " + kCohort + " run --nproc-per-node 4 --threads-per-proc 1 --no-dashboard";
  const auto straight = run_shell(run + " -- " + kExample + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --max-restarts 2 --keep-survivors -- " + kExample + " --ckpt-dir " + ckpt + " --snapshot-every 1" +
              example_args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  pid_t victim = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (victim < 0 && job.running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (count(read_all(job.log), "first_step_unix_ns") == 0) continue;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (pid_t p : worker_pids(ckpt))
      if (started_with(p, "COHORT_RANK") == "2") victim = p;
  }
  ASSERT_GT(victim, 0) << read_all(job.log);
  ::kill(victim, SIGKILL);
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_EQ(count(output, "while the other ranks keep running"), 1u) << output;
  EXPECT_EQ(count(output, "a collective failed"), 3u) << "every survivor rejoins:\n" << output;
  EXPECT_FALSE(contains(output, "restarting the job")) << output;
  EXPECT_EQ(final_state(output), final_state(straight.output)) << output;
  fs::remove_all(dir);
}

// Where a worker cannot rejoin — here one that trains outside keep_running(), so its heartbeats say
// so — --keep-survivors falls back to restarting the round, with the same result.
TEST(Recovery, KeepSurvivorsRestartsTheRoundWhereAWorkerCannotRejoin) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const fs::path dir = fs::temp_directory_path() / ("cohort_norejoin_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string example_args = " --no-eval --threads 1 --log-every 0 --max-steps 60 --report-first-step";
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 2 --no-dashboard";
  const auto straight = run_shell(run + " -- " + kExample + " --ckpt-dir " + (dir / "straight").string() + example_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --keep-survivors -- " + kExample + " --ckpt-dir " + ckpt + " --snapshot-every 1 --no-keep-running" +
              example_args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  const int sent = signal_at_random_moments(job, ckpt, SIGKILL, 1, 20261205, 100, 300);
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(sent, 1) << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "restarting the job (restart 1 of 2)")) << output;
  EXPECT_FALSE(contains(output, "keep running")) << output;
  EXPECT_EQ(final_state(output), final_state(straight.output)) << output;
  fs::remove_all(dir);
}

// Local SGD (and DiLoCo's outer optimizer) reconnects too: each rank's own parameters and the
// outer state come back from the snapshot, and the job ends where an uninterrupted one does.
TEST(Recovery, LocalSgdSurvivorsKeepRunningWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_survivors_keep_running(SIGKILL, 3, "", " --local-sgd 4 --outer nesterov");
}

// Each rank's param_checksum from the GPT example's result lines ("[r] {...}"), by rank.
std::map<std::string, std::string> gpt_checksums(const std::string& output) {
  std::map<std::string, std::string> out;
  const std::regex re("\\[([0-9]+)\\] \\{[^\n]*\"param_checksum\":\"([0-9a-f]+)\"");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) out[(*it)[1]] = (*it)[2];
  return out;
}

// ShardedDataParallel reconnects too (the GPT example, ZeRO-2 and ZeRO-3): a lost rank's shard and
// its AdamW state exist only in its snapshot, which the replacement and the survivor restore; two
// SIGKILLs at random steps, no full restart, the survivors keep their pids, at most one step
// recomputed per kill, and both ranks end bitwise where an uninterrupted run does.
class ShardedSurvivors : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardedSurvivors, KeepRunningWithTheUninterruptedRunsParameters) {
  if (!fs::is_directory("/usr/share/games/fortunes")) GTEST_SKIP() << "Debian's fortunes package is not installed";
  const std::string mode = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("cohort_sharded_survivors_" + mode + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string gpt = COHORT_GPT;
  const std::string args = " --preset tiny --seq-len 64 --layers 2 --dim 128 --batch 4 --threads 1 --eval-windows 32 "
                           "--sample-tokens 0 --steps 150 --log-every 1 --mode " + mode;
  const std::string run = kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 4 --no-dashboard";
  const auto straight = run_shell(run + " -- " + gpt + " --ckpt-dir " + (dir / "straight").string() + args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto expected = gpt_checksums(straight.output);
  ASSERT_EQ(expected.size(), 2u) << straight.output;

  const std::string ckpt = (dir / "faulty").string();
  Job job(run + " --keep-survivors --warm-spares --run-dir " + (dir / "run").string() + " -- " + gpt + " --ckpt-dir " +
              ckpt + " --snapshot-every 1" + args,
          (dir / "faulty.log").string());
  ASSERT_GT(job.pid, 0);
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<int> after_ms(100, 400);
  std::vector<pid_t> survivors;
  size_t trained = 0;  // steps logged when the last fault was sent
  for (int fault = 0; fault < 2 && job.running();) {
    // Five more steps logged since the last fault: the job trains again.
    if (count(read_all(job.log), " loss ") < trained + 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    const std::vector<pid_t> training = training_workers(ckpt, gpt);
    if (training.size() != 2 || !job.running()) continue;
    if (!survivors.empty())
      EXPECT_NE(std::find(training.begin(), training.end(), survivors.back()), training.end())
          << "survivor " << survivors.back() << " of fault " << fault << " is gone";
    const size_t victim = rng() % 2;
    trained = count(read_all(job.log), " loss ");
    ::kill(training[victim], SIGKILL);
    survivors.push_back(training[1 - victim]);
    ++fault;
  }
  const int exit_code = job.wait();
  const std::string output = read_all(job.log);
  ASSERT_EQ(survivors.size(), 2u) << "the job ended before the last fault: " << output;
  EXPECT_EQ(exit_code, 0) << output;
  EXPECT_EQ(count(output, "while the other ranks keep running"), 2u) << output;
  EXPECT_FALSE(contains(output, "restarting the job")) << "a full restart happened:\n" << output;
  EXPECT_EQ(count(output, "a collective failed"), 2u) << output;
  const auto lost = steps_lost_per_restore((dir / "run" / "events.jsonl").string());
  ASSERT_EQ(lost.size(), 2u) << read_all((dir / "run" / "events.jsonl").string());
  for (size_t i = 0; i < lost.size(); ++i) EXPECT_LE(lost[i], 1) << "recovery " << i + 1 << " went back " << lost[i] << " steps";
  EXPECT_EQ(gpt_checksums(output), expected) << "parameters differ from the uninterrupted run:\n" << output;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Levels, ShardedSurvivors, ::testing::Values("zero2", "zero3"));

// Whether a worker waits in init(): it has connected to its agent (a socket), which a spare does
// only once libtorch and its data are loaded (wait_if_standby).
bool has_socket(pid_t pid) {
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = fs::read_symlink(fd.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) return true;
  }
  return false;
}

// Every thread of `pid` at `nice`, but a snapshot's writer (and what it started) at the lowest.
void expect_trains_at(pid_t pid, int nice, const std::string& what) {
  const auto threads = thread_nices(pid);
  EXPECT_FALSE(threads.empty()) << what << " " << pid << " is gone";
  for (const auto& [tid, t] : threads)
    EXPECT_EQ(t.nice, t.name == "cohort-snapshot" ? cohort::detail::kBackgroundNice : nice)
        << "thread " << tid << " (" << t.name << ") of " << what << " " << pid;
}

// Warm spares load at the lowest priority (runtime/host/cpu_priority.h) where they can come back,
// and a released one trains at the job's priority, every thread of it: one kill, once both spares
// wait in init().
TEST(Recovery, AWarmSpareLoadsAtTheLowestPriorityAndTrainsAtTheJobs) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const int own = cohort::detail::this_thread_nice();
  const bool low = own < cohort::detail::kBackgroundNice && cohort::detail::can_return_to_nice(own);
  const fs::path dir = fs::temp_directory_path() / ("cohort_spare_nice_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ckpt = (dir / "ck").string();
  Job job(kCohort + " run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 2 --no-dashboard --keep-survivors "
              "--warm-spares -- " + kExample + " --ckpt-dir " + ckpt + " --snapshot-every 1 --no-eval --threads 1 "
              "--log-every 0 --max-steps 100000 --report-first-step",
          (dir / "log").string());
  ASSERT_GT(job.pid, 0);
  // Both ranks train and both spares wait in init().
  auto spares_of = [&](const std::vector<pid_t>& training) {
    std::vector<pid_t> spares;
    for (pid_t p : worker_pids(ckpt))
      if (std::find(training.begin(), training.end(), p) == training.end()) spares.push_back(p);
    return spares;
  };
  std::vector<pid_t> training, spares;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (job.running() && std::chrono::steady_clock::now() < deadline) {
    training = training_workers(ckpt);
    spares = spares_of(training);
    if (training.size() == 2 && spares.size() == 2 && has_socket(spares[0]) && has_socket(spares[1])) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(spares.size(), 2u) << read_all(job.log);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // their heartbeats reach the agent
  for (pid_t p : spares) EXPECT_EQ(thread_nices(p)[p].nice, low ? cohort::detail::kBackgroundNice : own) << "spare " << p;
  for (pid_t p : training) expect_trains_at(p, own, "worker");

  ::kill(training[0], SIGKILL);
  std::vector<pid_t> now;
  while (job.running() && std::chrono::steady_clock::now() < deadline) {
    now = training_workers(ckpt);
    if (now.size() == 2 && count(read_all(job.log), "first_step_unix_ns") >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string log = read_all(job.log);
  ASSERT_EQ(now.size(), 2u) << log;
  EXPECT_TRUE(contains(log, "a warm spare replaces it")) << log;
  EXPECT_NE(std::find(now.begin(), now.end(), training[1]), now.end()) << "the survivor is gone:\n" << log;
  const pid_t replacement = now[0] == training[1] ? now[1] : now[0];
  EXPECT_NE(std::find(spares.begin(), spares.end(), replacement), spares.end()) << "not a spare: " << replacement;
  expect_trains_at(replacement, own, "the released spare");

  for (pid_t launcher : [&] {
         std::vector<pid_t> v;
         std::istringstream in(run_shell("pgrep -P " + std::to_string(job.pid)).output);
         for (pid_t p; in >> p;) v.push_back(p);
         return v;
       }())
    ::kill(launcher, SIGTERM);
  job.wait();
  fs::remove_all(dir);
}

TEST(Recovery, SurvivorsKeepRunningThroughHangsWithTheUninterruptedRunsResult) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  expect_survivors_keep_running(SIGSTOP, 2, " --hang-timeout 3");
}
}  // namespace
