// Monitoring through `cohort run` with the real thing: the Fashion-MNIST example with its test flags
// (--inject-nan-step/-rank, --slow-rank/-ms, --on-nan; COHORT_FASHION_MNIST overrides the path
// CMake gave): NaN policies, a straggler named with its phase, a killed rank, all in one run. The
// same with a fake worker (metrics_probe) is monitor_process_test.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "monitor_run_fixtures.h"

using namespace monitor_run_test;

// ---------------------------------------------------------------------------------------------
// With the Fashion-MNIST example

namespace {

std::string fashion_mnist() {
  const char* over = std::getenv("COHORT_FASHION_MNIST");
  return over && *over ? over : FASHION_MNIST_BIN;
}

// The example is built with the tests and the dataset installed by scripts/setup.sh: a missing one
// is a failure, not a skip (a skip in CI would hide it).
#define REQUIRE_FASHION_MNIST()                                                                           \
  do {                                                                                                    \
    if (!std::filesystem::exists(fashion_mnist())) GTEST_FAIL() << "no " << fashion_mnist();              \
    if (!std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good())            \
      GTEST_FAIL() << "no Fashion-MNIST dataset (scripts/setup.sh installs dataset-fashion-mnist)";       \
  } while (0)

// The worker of `rank` among the children of the `cohort run` with pid `agent` (its environment
// says COHORT_RANK=<rank>); 0 when there is none.
pid_t worker_of_rank(pid_t agent, int rank) {
  std::istringstream children(slurp("/proc/" + std::to_string(agent) + "/task/" + std::to_string(agent) + "/children"));
  for (pid_t child; children >> child;) {
    std::string env = slurp("/proc/" + std::to_string(child) + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (contains("\n" + env, "\nCOHORT_RANK=" + std::to_string(rank) + "\n")) return child;
  }
  return 0;
}

std::vector<std::string> trainer(std::vector<std::string> args) {
  std::vector<std::string> cmd{fashion_mnist(), "--model", "mlp", "--train-limit", "4096", "--batch-size", "32",
                               "--no-eval", "--threads", "1"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

}  // namespace

TEST(MonitorFashionMnist, NanWithPolicyStopFailsTheJob) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2", "--on-nan", "stop"},
                            trainer({"--max-steps", "40", "--inject-nan-step", "10", "--inject-nan-rank", "1"})),
                 60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  const auto log = read_log(dir);
  const auto nan = events(log, "anomaly", "nan");
  ASSERT_GE(nan.size(), 1u) << dump(log);
  EXPECT_EQ(nan[0].value("policy", ""), "stop") << nan[0].dump();
  ASSERT_GE(events(log, "failure").size(), 1u) << dump(log);
  EXPECT_EQ(events(log, "finished").at(0)["state"], "failed");
}

TEST(MonitorFashionMnist, NanWithPolicySkipFinishesTheJob) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2", "--on-nan", "skip"},
                            trainer({"--max-steps", "30", "--inject-nan-step", "10", "--inject-nan-rank", "1"})),
                 60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  const auto log = read_log(dir);
  const auto nan = events(log, "anomaly", "nan");
  ASSERT_GE(nan.size(), 1u) << dump(log);
  EXPECT_TRUE(events(log, "failure").empty()) << dump(log);
  EXPECT_EQ(events(log, "finished").at(0)["state"], "succeeded");
  EXPECT_GE(metrics(log, 0).size(), 25u);
}

TEST(MonitorFashionMnist, SlowedRankIsNamedAStragglerWithItsPhase) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  // 120 ms, not 40: on two loaded cores a step of this MLP takes ~90 ms, and 40 ms more was ~1.5x,
  // right at the rule's factor (no straggler in some runs of the suite under load).
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2"},
                            trainer({"--max-steps", "60", "--slow-rank", "1", "--slow-ms", "120"})),
                 90);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  const auto log = read_log(dir);
  const auto slow = events(log, "anomaly", "straggler");
  ASSERT_GE(slow.size(), 1u) << dump(log);
  EXPECT_EQ(slow[0]["rank"], 1);
  EXPECT_EQ(slow[0]["phase"], "data") << "the example sleeps before its forward: " << slow[0].dump();
  for (const auto& s : slow) EXPECT_EQ(s["rank"], 1) << "only the slowed rank";
}

TEST(MonitorFashionMnist, KilledRankIsAFailureEvent) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Child job(cohort_run(dir, {"--nproc-per-node", "2"}, trainer({"--max-steps", "100000", "--epochs", "100"})));
  ASSERT_TRUE(wait_until([&] { return metrics(read_log(dir), 1).size() >= 3; }, 60)) << "no metrics from rank 1";
  // Rank 1's worker: the child of cohort run whose environment says COHORT_RANK=1.
  const pid_t victim = worker_of_rank(job.pid(), 1);
  ASSERT_NE(victim, 0);
  kill(victim, SIGKILL);
  Result r = job.wait(60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  const auto log = read_log(dir);
  const auto failures = events(log, "failure");
  ASSERT_EQ(failures.size(), 1u) << dump(log);
  EXPECT_EQ(failures[0]["rank"], 1);
  EXPECT_EQ(failures[0]["reason"], "was killed by signal 9 (SIGKILL: Killed)");
}

// The combined case: one run with an injected NaN (policy skip), a slowed rank and a
// killed rank. Its log holds all of it, in order of cause: the NaN anomaly, the straggler naming
// the slowed rank and its phase, the killed rank's failure, the restart, and the end.
TEST(MonitorFashionMnist, OneRunWithNanSlowRankAndKilledRankLogsEveryEvent) {
  REQUIRE_FASHION_MNIST();
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Child job(cohort_run(dir, {"--nproc-per-node", "2", "--on-nan", "skip", "--max-restarts", "1"},
                       trainer({"--max-steps", "150", "--epochs", "100", "--inject-nan-step", "5",
                                "--inject-nan-rank", "1", "--slow-rank", "1", "--slow-ms", "120"})));  // (120: see above)
  ASSERT_TRUE(wait_until([&] { return !events(read_log(dir), "anomaly", "straggler").empty(); }, 90))
      << "no straggler event: " << dump(read_log(dir));
  const pid_t victim = worker_of_rank(job.pid(), 0);  // rank 1 is the slowed one
  ASSERT_NE(victim, 0);
  kill(victim, SIGKILL);
  Result r = job.wait(120);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << "the restarted job finishes: " << r.err;

  const auto log = read_log(dir);
  const auto nan = events(log, "anomaly", "nan");
  ASSERT_GE(nan.size(), 1u) << dump(log);
  EXPECT_EQ(nan[0].value("policy", ""), "skip") << nan[0].dump();
  EXPECT_EQ(nan[0]["step"], 5) << nan[0].dump();
  const auto slow = events(log, "anomaly", "straggler");
  ASSERT_GE(slow.size(), 1u) << dump(log);
  for (const auto& s : slow) {
    EXPECT_EQ(s["rank"], 1) << "only the slowed rank: " << s.dump();
    EXPECT_EQ(s["phase"], "data") << s.dump();
  }
  const auto failures = events(log, "failure");
  ASSERT_EQ(failures.size(), 1u) << dump(log);
  EXPECT_EQ(failures[0]["rank"], 0);
  EXPECT_EQ(failures[0]["reason"], "was killed by signal 9 (SIGKILL: Killed)");
  ASSERT_EQ(events(log, "restart").size(), 1u) << dump(log);
  EXPECT_EQ(events(log, "finished").at(0)["state"], "succeeded");
  // Cause before effect: the anomalies of the first round come before the failure they preceded.
  auto index_of = [&](const json& e) { return std::find(log.begin(), log.end(), e) - log.begin(); };
  EXPECT_LT(index_of(nan[0]), index_of(failures[0]));
  EXPECT_LT(index_of(slow[0]), index_of(failures[0]));
  EXPECT_LT(index_of(failures[0]), index_of(events(log, "restart")[0]));
}
