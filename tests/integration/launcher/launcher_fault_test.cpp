// `cohort run` when things go wrong: a worker fails or is killed, the launcher is interrupted or
// killed. Real processes and real signals; survivors are checked in the process table.
#include <gtest/gtest.h>

#include "launcher_test_util.h"

using namespace launcher_test;

TEST(LauncherFault, NonZeroExitStopsTheOthersAndIsNamed) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "3", "--", ENV_PROBE_BIN, "--exit", "1:3", "--delay", "500",
           "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 3, 20);
  ASSERT_EQ(pids.size(), 3u);
  // Rank 1 exits after 0.5 s; everything must be gone within 5 s of that.
  ASSERT_TRUE(all_gone_within({pids[1]}, 10));
  EXPECT_TRUE(all_gone_within(pids, 5)) << "workers survived a failed rank";
  Result r = c.wait(10);
  ASSERT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.err.find("rank 1 (node 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1] rank 1 giving up now"), std::string::npos) << "summary quotes the last lines:\n" << r.err;
}

TEST(LauncherFault, KilledWorkerIsReportedWithTheSignalName) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "2", "--", ENV_PROBE_BIN, "--kill", "0", "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(pids.size(), 2u);
  Result r = c.wait(15);
  ASSERT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.err.find("rank 0 (node 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone_within(pids, 5));
}

TEST(LauncherFault, SigintStopsEveryWorker) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "3", "--", ENV_PROBE_BIN, "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 3, 20);
  ASSERT_EQ(pids.size(), 3u);
  kill(c.pid(), SIGINT);
  Result r = c.wait(15);
  ASSERT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.err.find("SIGINT"), std::string::npos) << r.err;
  EXPECT_TRUE(all_gone_within(pids, 5)) << "a worker survived SIGINT to cohort run";
}

TEST(LauncherFault, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "2", "--stop-timeout", "1", "--", ENV_PROBE_BIN, "--ignore-term",
           "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(pids.size(), 2u);
  kill(c.pid(), SIGTERM);
  Result r = c.wait(15);
  ASSERT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_TRUE(all_gone_within(pids, 5)) << "a worker ignoring SIGTERM survived";
}

TEST(LauncherFault, SigkillToTheLauncherTakesTheWorkersAlong) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "3", "--", ENV_PROBE_BIN, "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 3, 20);
  ASSERT_EQ(pids.size(), 3u);
  kill(c.pid(), SIGKILL);
  Result r = c.wait(10);
  EXPECT_TRUE(WIFSIGNALED(r.status));
  EXPECT_TRUE(all_gone_within(pids, 5)) << "a worker outlived cohort run (parent-death signal)";
}
