// `cohort run` when things go wrong: a worker fails or is killed, the launcher is interrupted or
// killed. Real processes and real signals; survivors are checked in the process table.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>

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

namespace {
// Zombies whose parent is `parent`: dead children it has not waited for.
int zombies_of(pid_t parent) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close_paren = line.rfind(')');
    char state = 0;
    long ppid = 0;
    if (close_paren != std::string::npos && std::sscanf(line.c_str() + close_paren + 1, " %c %ld", &state, &ppid) == 2 &&
        state == 'Z' && ppid == parent)
      ++n;
  }
  return n;
}
}  // namespace

// --keep-survivors --warm-spares make the agent a child subreaper, so what a dying worker leaves
// behind becomes the agent's. The first three workers (replacements, restarts, spares: whichever
// runs) each start a child and exit 1; the fourth stays. The three children end after their worker
// (or are stopped with its process group) and must be reaped while the job runs, not pile up as
// zombies until the agent exits.
TEST(LauncherFault, OrphansOfDeadWorkersAreReapedWhileTheJobRuns) {
  TempDir dir;
  const std::string worker =
      "n=$(ls \"$PROBE_DIR\" | grep -c '^run\\.'); touch \"$PROBE_DIR/run.$$\"; "
      "if [ \"$n\" -lt 3 ]; then sleep 0.3 & echo $! > \"$PROBE_DIR/orphan.$!\"; exit 1; fi; "
      "echo $$ > \"$PROBE_DIR/rank0.pid\"; exec sleep 60";
  Child c({COHORT_BIN, "run", "--nproc-per-node", "1", "--max-restarts", "8", "--keep-survivors", "--warm-spares",
           "--", "/bin/sh", "-c", worker},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 1, 60);
  ASSERT_EQ(pids.size(), 1u) << "the fourth worker never started";
  std::vector<pid_t> orphans;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("orphan.", 0) == 0) orphans.push_back(std::stoi(slurp(e.path().string())));
  ASSERT_EQ(orphans.size(), 3u);
  ASSERT_TRUE(all_gone_within(orphans, 10)) << "the workers' children did not end";  // zombies count as gone
  int zombies = zombies_of(c.pid());
  for (const auto until = clock::now() + std::chrono::seconds(10); zombies > 0 && clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    zombies = zombies_of(c.pid());
  }
  ASSERT_FALSE(process_gone(c.pid())) << "cohort run ended early";
  EXPECT_EQ(zombies, 0) << "zombies under the agent (pid " << c.pid() << ")";
  kill(c.pid(), SIGINT);
  Result r = c.wait(15);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("restart 3 of 8"), std::string::npos) << r.err;
}
