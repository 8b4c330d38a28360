// `cohort run --max-restarts K`: a failed round stops every worker on every node and starts the job
// again with the next restart count, up to K times; then the job fails with the history of every
// round's failure. Real processes and signals; env_probe's --until-restart N makes a program that
// misbehaves only in its first N rounds. The only time limits are generous "no hang" bounds.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

// The restart counts each rank saw, from the probes' "[r] ENV COHORT_RESTART_COUNT=n" lines.
std::map<int, std::vector<int>> counts_by_rank(const std::string& out,
                                               const std::string& name = "COHORT_RESTART_COUNT") {
  std::map<int, std::vector<int>> counts;
  std::regex re("^\\[(\\d+)\\] ENV " + name + "=(\\d+)$");
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) counts[std::stoi(m[1])].push_back(std::stoi(m[2]));
  }
  return counts;
}

// The "  round N at ...: rank ..." lines of the failure history.
std::vector<std::string> history_lines(const std::string& err) {
  std::vector<std::string> out;
  std::regex re(R"(^  round \d+ at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}: rank .*)");
  for (const auto& line : lines_of(err)) {
    if (std::regex_match(line, re)) out.push_back(line);
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// Waits until every rank's pid file names a process other than the one in `old`.
std::vector<pid_t> wait_for_new_pids(const std::string& dir, const std::vector<pid_t>& old, double timeout_s) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    std::vector<pid_t> now = wait_for_pids(dir, static_cast<int>(old.size()), 0);
    bool all_new = now.size() == old.size();
    for (size_t i = 0; all_new && i < old.size(); ++i) all_new = now[i] != old[i];
    if (all_new || clock::now() > deadline) return now;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> restart_node_cmd(int node, int nproc, int port, int max_restarts, std::vector<std::string> program) {
  std::vector<std::string> cmd{COHORT_BIN,      "run", "--nnodes", "2", "--node-rank", std::to_string(node),
                               "--nproc-per-node", std::to_string(nproc), "--master-port", std::to_string(port),
                               "--rdzv-timeout", "30", "--max-restarts", std::to_string(max_restarts), "--"};
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

}  // namespace

TEST(LauncherRestart, FailsTwiceThenSucceedsOnTheThirdRound) {
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "2", "--max-restarts", "3", "--", ENV_PROBE_BIN, "--exit",
                  "1:3", "--delay", "100", "--until-restart", "2"},
                 60);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  for (int rank : {0, 1}) {
    EXPECT_EQ(counts_by_rank(r.out)[rank], (std::vector<int>{0, 1, 2})) << r.out;
    EXPECT_EQ(counts_by_rank(r.out, "TORCHELASTIC_RESTART_COUNT")[rank], (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(counts_by_rank(r.out, "TORCHELASTIC_MAX_RESTARTS")[rank], (std::vector<int>{3, 3, 3}));
  }
  EXPECT_EQ(count_of(r.err, "; restarting the job (restart "), 2u) << r.err;
  EXPECT_NE(r.err.find("round 1 failed: rank 1 (node 0, local rank 1, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job succeeded after 2 restarts"), std::string::npos) << r.err;
}

TEST(LauncherRestart, AlwaysCrashingProgramEndsAfterKRestartsWithTheHistory) {
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "2", "--max-restarts", "2", "--", ENV_PROBE_BIN, "--exit",
                  "1:3", "--delay", "100", "--sleep", "120"},
                 60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  const auto history = history_lines(r.err);
  ASSERT_EQ(history.size(), 3u) << r.err;  // K + 1 failures
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(history[round].rfind("  round " + std::to_string(round) + " at ", 0), 0u) << history[round];
    EXPECT_NE(history[round].find(": rank 1 (node 0, local rank 1, pid "), std::string::npos) << history[round];
    EXPECT_NE(history[round].find(") exited with code 3"), std::string::npos) << history[round];
  }
  EXPECT_NE(r.err.find("failure history (2 restarts, --max-restarts 2)"), std::string::npos) << r.err;
  // The last round's summary with the worker's last lines follows the history.
  EXPECT_GT(r.err.find("job failed: rank 1 (node 0"), r.err.find("  round 2 at ")) << r.err;
  EXPECT_NE(r.err.find("[1] rank 1 giving up now"), std::string::npos) << r.err;
  EXPECT_EQ(counts_by_rank(r.out)[0], (std::vector<int>{0, 1, 2}));
}

TEST(LauncherRestart, NoRestartsFailsOnTheFirstFailure) {
  using Args = std::vector<std::string>;
  for (const Args& flag : {Args{}, Args{"--max-restarts", "0"}}) {
    std::vector<std::string> cmd{COHORT_BIN, "run", "--nproc-per-node", "2"};
    cmd.insert(cmd.end(), flag.begin(), flag.end());
    for (const char* a : {"--", ENV_PROBE_BIN, "--exit", "1:3", "--delay", "100", "--sleep", "120"}) cmd.push_back(a);
    Result r = run(cmd, 30);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code(), 1) << r.err;
    EXPECT_EQ(counts_by_rank(r.out)[0], (std::vector<int>{0})) << r.out;
    EXPECT_EQ(counts_by_rank(r.out, "TORCHELASTIC_MAX_RESTARTS")[0], (std::vector<int>{0}));
    EXPECT_EQ(r.err.find("restart"), std::string::npos) << "fail fast, as before restarts existed:\n" << r.err;
    EXPECT_EQ(r.err.find("failure history"), std::string::npos) << r.err;
    // The summary is the first thing said after the start lines (run directory, dashboard).
    const size_t summary = r.err.find("cohort run: job failed: rank 1 (node 0, local rank 1, pid ");
    ASSERT_NE(summary, std::string::npos) << r.err;
    for (const auto& line : lines_of(r.err.substr(0, summary))) {
      EXPECT_TRUE(line.rfind("cohort run: run directory ", 0) == 0 || line.rfind("cohort run: dashboard at ", 0) == 0)
          << line;
    }
  }
}

TEST(LauncherRestart, SigkilledWorkerIsRestartedWithItsPeer) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "2", "--max-restarts", "1", "--", ENV_PROBE_BIN, "--sleep", "120",
           "--until-restart", "1"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> first = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(first.size(), 2u);
  kill(first[1], SIGKILL);
  // Both ranks run again as new processes (the survivor was stopped, not left running).
  std::vector<pid_t> second = wait_for_new_pids(dir.path(), first, 10);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_NE(second[0], first[0]) << "rank 0 was not restarted";
  EXPECT_NE(second[1], first[1]) << "rank 1 was not restarted";
  EXPECT_TRUE(all_gone_within(first, 5)) << "a worker of the first round survived the restart";
  Result r = c.wait(30);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("round 0 failed: rank 1 (node 0, local rank 1, pid " + std::to_string(first[1]) +
                       ") was killed by signal 9 (SIGKILL"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(counts_by_rank(r.out)[0], (std::vector<int>{0, 1}));
}

TEST(LauncherRestart, InterruptIsNotRestarted) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "2", "--max-restarts", "3", "--", ENV_PROBE_BIN, "--sleep", "120"},
          {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(pids.size(), 2u);
  kill(c.pid(), SIGINT);
  Result r = c.wait(15);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 130) << r.err;
  EXPECT_TRUE(all_gone_within(pids, 5));
  EXPECT_EQ(counts_by_rank(r.out)[0], (std::vector<int>{0})) << "restarted after SIGINT:\n" << r.out;
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("received SIGINT"), std::string::npos) << r.err;
}

TEST(LauncherRestart, FailureOnNodeOneRestartsBothNodes) {
  TempDir dir;
  const int port = free_port_pair();
  // Global rank 2 (node 1) fails in round 0; node 0's two workers would sleep for minutes.
  const std::vector<std::string> program{ENV_PROBE_BIN, "--exit",  "2:3",           "--delay", "500",
                                         "--sleep",     "120",     "--until-restart", "1"};
  Child n0(restart_node_cmd(0, 2, port, 2, program), {"PROBE_DIR=" + dir.path()});
  Child n1(restart_node_cmd(1, 1, port, 2, program), {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> first = wait_for_pids(dir.path(), 3, 20);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_TRUE(all_gone_within({first[2]}, 10));
  // Node 0 learns of node 1's failure, stops its workers and starts round 1 within a bound.
  std::vector<pid_t> second = wait_for_new_pids(dir.path(), first, 10);
  ASSERT_EQ(second.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_NE(second[rank], first[rank]) << "rank " << rank << " not restarted";
  EXPECT_TRUE(all_gone_within(first, 5));
  Result r0 = n0.wait(30), r1 = n1.wait(30);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  // Both nodes ran the same rounds with the same counts.
  EXPECT_EQ(counts_by_rank(r0.out)[0], (std::vector<int>{0, 1})) << r0.out;
  EXPECT_EQ(counts_by_rank(r0.out)[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(counts_by_rank(r1.out)[2], (std::vector<int>{0, 1})) << r1.out;
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->err.find("round 0 failed: rank 2 (node 1, local rank 0, pid " + std::to_string(first[2]) +
                          ") exited with code 3; restarting the job (restart 1 of 2)"),
              std::string::npos)
        << r->err;
    EXPECT_NE(r->err.find("job succeeded after 1 restart\n"), std::string::npos) << r->err;
  }
}

TEST(LauncherRestart, TwoNodesAgreeOnTheHistoryWhenRestartsRunOut) {
  const int port = free_port_pair();
  // Rank 1 (node 0) fails in every round: node 1's worker is restarted each time, then both fail.
  const std::vector<std::string> program{ENV_PROBE_BIN, "--exit", "1:4", "--delay", "200", "--sleep", "120"};
  Child n0(restart_node_cmd(0, 2, port, 1, program));
  Child n1(restart_node_cmd(1, 1, port, 1, program));
  Result r0 = n0.wait(60), r1 = n1.wait(60);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 1) << r0.err;
  EXPECT_EQ(r1.exit_code(), 1) << r1.err;
  EXPECT_EQ(counts_by_rank(r1.out)[2], (std::vector<int>{0, 1})) << r1.out;
  const auto h0 = history_lines(r0.err), h1 = history_lines(r1.err);
  ASSERT_EQ(h0.size(), 2u) << r0.err;
  EXPECT_EQ(h0, h1) << "the nodes print different histories:\n" << r0.err << "\n" << r1.err;
  for (const auto& line : h0) EXPECT_NE(line.find(": rank 1 (node 0, local rank 1, pid "), std::string::npos) << line;
  EXPECT_NE(r1.err.find("job failed: rank 1 (node 0"), std::string::npos) << r1.err;
}

TEST(LauncherRestart, InterruptOnNodeOneEndsBothNodesWithoutRestart) {
  TempDir dir;
  const int port = free_port_pair();
  const std::vector<std::string> program{ENV_PROBE_BIN, "--sleep", "120"};
  Child n0(restart_node_cmd(0, 1, port, 3, program), {"PROBE_DIR=" + dir.path()});
  Child n1(restart_node_cmd(1, 1, port, 3, program), {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(pids.size(), 2u);
  kill(n1.pid(), SIGTERM);
  Result r0 = n0.wait(20), r1 = n1.wait(20);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r1.exit_code(), 128 + SIGTERM) << r1.err;
  EXPECT_EQ(r0.exit_code(), 1) << r0.err;
  EXPECT_TRUE(all_gone_within(pids, 5));
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->err.find("node 1's cohort run received SIGTERM"), std::string::npos) << r->err;
    EXPECT_EQ(r->err.find("restarting"), std::string::npos) << r->err;
  }
  EXPECT_EQ(counts_by_rank(r0.out)[0], (std::vector<int>{0}));
}

// --warm-spares with a program that never calls cohort::init(): its spares cannot wait for their
// round, they run ahead and exit. The agent must not adopt them (that would count their early exit
// as the round's success): it warns, and the restart starts new workers, whose output is the only
// round-1 output relayed. The spares start 10 s into a round whose workers never train.
TEST(LauncherRestart, WarmSparesOfAProgramWithoutInitAreNotAdopted) {
  TempDir dir;
  Child c({COHORT_BIN, "run", "--nproc-per-node", "2", "--max-restarts", "1", "--warm-spares", "--", ENV_PROBE_BIN,
           "--kill", "1", "--delay", "12500", "--sleep", "30", "--until-restart", "1"},
          {"PROBE_DIR=" + dir.path()});
  Result r = c.wait(60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("a warm spare exited (code 0) before its round began; --warm-spares needs a program that "
                       "calls cohort::init()"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(counts_by_rank(r.out)[0], (std::vector<int>{0, 1})) << r.out;
  EXPECT_EQ(counts_by_rank(r.out)[1], (std::vector<int>{0, 1})) << r.out;
}
