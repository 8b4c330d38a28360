// `cohort run --nnodes MIN:MAX --rdzv-endpoint ... --rdzv-id ...`: elastic membership with agents on
// loopback, real processes and signals. env_probe is the worker: it prints its variables, writes
// its pid to $PROBE_DIR (one directory per agent here), and with --until-restart 1 exits at once
// from round 1 on, so that "the job re-formed" ends a test quickly. The only time limits are
// generous "no hang" bounds. (Network namespaces and the Fashion-MNIST example:
// launcher_elastic_netns_test.cpp.)
#include <gtest/gtest.h>

#include <glob.h>

#include <algorithm>
#include <map>
#include <regex>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

struct Agent {
  std::string role = "auto";
  std::string nnodes = "2:3";
  std::string id = "job";
  std::vector<std::string> extra;  // more options
};

std::vector<std::string> elastic_cmd(int port, const Agent& a, int nproc, const std::vector<std::string>& program) {
  std::vector<std::string> cmd{COHORT_BIN,       "run",           "--nnodes",         a.nnodes,
                               "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", a.id,
                               "--rdzv-role",     a.role,          "--nproc-per-node", std::to_string(nproc),
                               "--node-timeout",  "2"};
  cmd.insert(cmd.end(), a.extra.begin(), a.extra.end());
  if (std::find(a.extra.begin(), a.extra.end(), "--rdzv-timeout") == a.extra.end()) {
    cmd.insert(cmd.end(), {"--rdzv-timeout", "30"});
  }
  cmd.push_back("--");
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

// The values a probe printed for `name`, in order ("[r] ENV NAME=v" lines).
std::vector<std::string> values_of(const std::string& out, const std::string& name) {
  std::vector<std::string> values;
  std::regex re("^\\[\\d+\\] ENV " + name + "=(.*)$");
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) values.push_back(m[1]);
  }
  return values;
}

// Pids the probes of one agent wrote (any rank) into `dir`.
std::vector<pid_t> pids_in(const std::string& dir) {
  std::vector<pid_t> pids;
  glob_t g{};
  if (glob((dir + "/rank*.pid").c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      std::ifstream f(g.gl_pathv[i]);
      pid_t p = 0;
      if (f >> p && p > 0) pids.push_back(p);
    }
  }
  globfree(&g);
  return pids;
}

// Waits until `dir` holds n pid files (a round started there).
std::vector<pid_t> wait_for_pid_files(const std::string& dir, size_t n, double timeout_s) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    auto pids = pids_in(dir);
    if (pids.size() >= n || clock::now() > deadline) return pids;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

const std::vector<std::string> kSleepThenExitInRound1{ENV_PROBE_BIN, "--sleep", "60", "--until-restart", "1"};

}  // namespace

TEST(LauncherElastic, BadElasticOptionsAreOneLineErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nnodes", "2:3"},                                                   // no endpoint
           {"--nnodes", "3:2", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id", "j"},  // MIN > MAX
           {"--nnodes", "2:3", "--rdzv-endpoint", "127.0.0.1:1"},                  // no id
           {"--nnodes", "2:x"}}) {
    std::vector<std::string> cmd{COHORT_BIN, "run"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    cmd.push_back(ENV_PROBE_BIN);
    Result r = run(cmd, 10);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code(), 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos) << r.err;
  }
}

TEST(LauncherElastic, SettleWindowAdmitsAThirdNode) {
  const int port = free_port();
  // MIN 2 is reached by the first two agents; the third arrives within the settle window, so
  // round 0 forms with all three (MAX 4 is not reached: only the window lets it in).
  Agent a{"host", "2:4", "job", {"--rdzv-settle", "6", "-v"}};
  Agent m{"member", "2:4", "job", {"--rdzv-settle", "6"}};
  const std::vector<std::string> program{ENV_PROBE_BIN, "--sleep", "0.2"};
  Child host(elastic_cmd(port, a, 1, program));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child first(elastic_cmd(port, m, 1, program));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  Child third(elastic_cmd(port, m, 2, program));
  Result rh = host.wait(60), r1 = first.wait(60), r3 = third.wait(60);
  ASSERT_FALSE(rh.timed_out || r1.timed_out || r3.timed_out);
  ASSERT_EQ(rh.exit_code(), 0) << rh.err;
  ASSERT_EQ(r1.exit_code(), 0) << r1.err;
  ASSERT_EQ(r3.exit_code(), 0) << r3.err;
  EXPECT_NE(rh.err.find("formed at 127.0.0.1:" + std::to_string(port) + ": 3 nodes, 4 workers"), std::string::npos)
      << rh.err;
  // Ranks node by node in join order; one round only.
  EXPECT_EQ(values_of(rh.out, "COHORT_RANK"), (std::vector<std::string>{"0"}));
  EXPECT_EQ(values_of(r1.out, "COHORT_RANK"), (std::vector<std::string>{"1"}));
  EXPECT_EQ(values_of(r3.out, "COHORT_NODE_RANK"), (std::vector<std::string>{"2", "2"}));
  for (const Result* r : {&rh, &r1, &r3}) {
    for (const auto& w : values_of(r->out, "COHORT_WORLD_SIZE")) EXPECT_EQ(w, "4") << r->out;
    for (const auto& c : values_of(r->out, "COHORT_RESTART_COUNT")) EXPECT_EQ(c, "0") << r->out;
    for (const auto& p : values_of(r->out, "COHORT_MASTER_ADDR")) EXPECT_EQ(p, "127.0.0.1");
  }
  // One store, on the host's machine, for every node.
  const auto port_of_host = values_of(rh.out, "COHORT_MASTER_PORT");
  ASSERT_EQ(port_of_host.size(), 1u);
  EXPECT_EQ(values_of(r3.out, "COHORT_MASTER_PORT"), std::vector<std::string>(2, port_of_host[0]));
}

TEST(LauncherElastic, MinNeverReachedIsAClearErrorOnEveryAgent) {
  const int port = free_port();
  Agent a{"host", "3:4", "job", {"--rdzv-timeout", "3"}};
  Agent m{"member", "3:4", "job", {"--rdzv-timeout", "3"}};
  Child host(elastic_cmd(port, a, 1, {ENV_PROBE_BIN}));
  Child member(elastic_cmd(port, m, 1, {ENV_PROBE_BIN}));
  Result rh = host.wait(30), rm = member.wait(30);
  ASSERT_FALSE(rh.timed_out || rm.timed_out) << "an agent hung waiting for MIN";
  for (const Result* r : {&rh, &rm}) {
    EXPECT_EQ(r->exit_code(), 3) << r->err;
    EXPECT_NE(r->err.find("only 2 of the at least 3 nodes (--nnodes 3:4) joined job 'job' at 127.0.0.1:" +
                          std::to_string(port) + " within 3 s"),
              std::string::npos)
        << r->err;
    EXPECT_EQ(values_of(r->out, "COHORT_RANK").size(), 0u) << "a worker started:\n" << r->out;
  }
  // Nobody listening at all: the member gives up at the same bound.
  Result alone = run(elastic_cmd(free_port(), m, 1, {ENV_PROBE_BIN}), 30);
  ASSERT_FALSE(alone.timed_out);
  EXPECT_EQ(alone.exit_code(), 3) << alone.err;
  EXPECT_NE(alone.err.find("could not reach the rendezvous host at 127.0.0.1:"), std::string::npos) << alone.err;
}

TEST(LauncherElastic, WrongRdzvIdIsRefusedAndTheJobGoesOn) {
  const int port = free_port();
  Agent a{"host", "2:2", "alpha", {}};
  Agent wrong{"member", "2:2", "beta", {}};
  Agent right{"member", "2:2", "alpha", {}};
  const std::vector<std::string> program{ENV_PROBE_BIN, "--sleep", "0.2"};
  Child host(elastic_cmd(port, a, 1, program));
  Result rw = run(elastic_cmd(port, wrong, 1, program), 30);
  ASSERT_FALSE(rw.timed_out);
  EXPECT_EQ(rw.exit_code(), 2) << rw.err;
  EXPECT_EQ(lines_of(rw.err).size(), 1u) << rw.err;
  EXPECT_NE(rw.err.find("is job 'alpha', not 'beta' (--rdzv-id)"), std::string::npos) << rw.err;
  Child member(elastic_cmd(port, right, 1, program));
  Result rh = host.wait(60), rm = member.wait(60);
  ASSERT_FALSE(rh.timed_out || rm.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(rm.exit_code(), 0) << rm.err;
  EXPECT_NE(rh.err.find("refused a node at 127.0.0.1"), std::string::npos) << rh.err;
  EXPECT_EQ(values_of(rm.out, "COHORT_WORLD_SIZE"), (std::vector<std::string>{"2"}));
}

TEST(LauncherElastic, LostNodeLeavesTheOthersAtTheSmallerWorldSize) {
  TempDir dh, d1, d2;
  const int port = free_port();
  // --max-restarts 0: a membership change must not count as a restart.
  Agent a{"host", "2:3", "job", {"--max-restarts", "0"}};
  Agent m{"member", "2:3", "job", {"--max-restarts", "0"}};
  Child host(elastic_cmd(port, a, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + dh.path()});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child keep(elastic_cmd(port, m, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + d1.path()});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child lose(elastic_cmd(port, m, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + d2.path()});
  std::vector<pid_t> lost_workers = wait_for_pid_files(d2.path(), 1, 30);
  ASSERT_EQ(lost_workers.size(), 1u);
  ASSERT_EQ(wait_for_pid_files(dh.path(), 1, 30).size(), 1u);
  kill(lose.pid(), SIGKILL);  // the agent vanishes; its worker dies with it (parent-death signal)
  Result rh = host.wait(60), r1 = keep.wait(60);
  ASSERT_FALSE(rh.timed_out || r1.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_TRUE(all_gone_within(lost_workers, 5));
  for (const Result* r : {&rh, &r1}) {
    EXPECT_EQ(values_of(r->out, "COHORT_WORLD_SIZE"), (std::vector<std::string>{"3", "2"})) << r->out;
    EXPECT_EQ(values_of(r->out, "COHORT_RESTART_COUNT"), (std::vector<std::string>{"0", "1"})) << r->out;
    EXPECT_NE(r->err.find(" at 127.0.0.1 (cohort run pid " + std::to_string(lose.pid()) +
                          ") was lost (its connection closed); round 1 runs on 2 nodes with 2 workers (a "
                          "membership change, not a restart)"),
              std::string::npos)
        << r->err;
  }
  // The remaining member moves up next to the host (node 1 of 2, whatever its place before).
  const auto ranks = values_of(r1.out, "COHORT_RANK"), nodes = values_of(r1.out, "COHORT_NODE_RANK");
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(ranks[1], "1");
  EXPECT_EQ(nodes[1], "1");
}

TEST(LauncherElastic, SilentNodeIsDroppedWithoutWaitingForTcp) {
  TempDir dh, d1, d2;
  const int port = free_port();
  Agent a{"host", "2:3", "job", {}};
  Agent m{"member", "2:3", "job", {}};
  Child host(elastic_cmd(port, a, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + dh.path()});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child keep(elastic_cmd(port, m, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + d1.path()});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child silent(elastic_cmd(port, m, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + d2.path()});
  ASSERT_EQ(wait_for_pid_files(d2.path(), 1, 30).size(), 1u);
  kill(silent.pid(), SIGSTOP);  // alive, connection open, but it says nothing any more
  Result rh = host.wait(60), r1 = keep.wait(60);
  kill(silent.pid(), SIGCONT);
  Result rs = silent.wait(30);
  ASSERT_FALSE(rh.timed_out || r1.timed_out || rs.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_NE(rh.err.find("was lost (no message for 2 s)"), std::string::npos) << rh.err;
  EXPECT_EQ(values_of(r1.out, "COHORT_WORLD_SIZE"), (std::vector<std::string>{"3", "2"})) << r1.out;
  // Woken up, the dropped node learns it and stops (its own worker included).
  EXPECT_EQ(rs.exit_code(), 1) << rs.err;
  EXPECT_NE(rs.err.find("dropped it (no message for 2 s)"), std::string::npos) << rs.err;
}

TEST(LauncherElastic, NodeJoiningARunningJobMakesItGrowAtTheNextRound) {
  TempDir dh, d1;
  const int port = free_port();
  Agent a{"host", "2:3", "job", {"--rdzv-settle", "0"}};
  Agent m{"member", "2:3", "job", {"--rdzv-settle", "0"}};
  Child host(elastic_cmd(port, a, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + dh.path()});
  Child first(elastic_cmd(port, m, 1, kSleepThenExitInRound1), {"PROBE_DIR=" + d1.path()});
  ASSERT_EQ(wait_for_pid_files(d1.path(), 1, 30).size(), 1u);  // round 0 runs with two nodes
  Child late(elastic_cmd(port, m, 2, kSleepThenExitInRound1));
  Result rh = host.wait(60), r1 = first.wait(60), rl = late.wait(60);
  ASSERT_FALSE(rh.timed_out || r1.timed_out || rl.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_EQ(rl.exit_code(), 0) << rl.err;
  EXPECT_EQ(values_of(rh.out, "COHORT_WORLD_SIZE"), (std::vector<std::string>{"2", "4"})) << rh.out;
  EXPECT_EQ(values_of(rl.out, "COHORT_RESTART_COUNT"), (std::vector<std::string>{"1", "1"})) << rl.out;
  EXPECT_EQ(values_of(rl.out, "COHORT_NODE_RANK"), (std::vector<std::string>{"2", "2"})) << rl.out;
  for (const Result* r : {&rh, &r1, &rl}) {
    EXPECT_NE(r->err.find("round 0 ended: node at 127.0.0.1 (cohort run pid " + std::to_string(late.pid()) +
                          ") joined; round 1 runs on 3 nodes with 4 workers (a membership change, not a restart)"),
              std::string::npos)
        << r->err;
  }
}

TEST(LauncherElastic, SpareBeyondMaxWaitsAndEndsWithTheJob) {
  const int port = free_port();
  Agent a{"host", "2:2", "job", {}};
  Agent m{"member", "2:2", "job", {}};
  TempDir d1;
  Child host(elastic_cmd(port, a, 1, {ENV_PROBE_BIN, "--sleep", "3"}));
  Child first(elastic_cmd(port, m, 1, {ENV_PROBE_BIN, "--sleep", "3"}), {"PROBE_DIR=" + d1.path()});
  ASSERT_EQ(wait_for_pid_files(d1.path(), 1, 30).size(), 1u);
  Child spare(elastic_cmd(port, m, 1, {ENV_PROBE_BIN}));
  Result rh = host.wait(60), r1 = first.wait(60), rs = spare.wait(60);
  ASSERT_FALSE(rh.timed_out || r1.timed_out || rs.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(rs.exit_code(), 0) << rs.err;
  EXPECT_NE(rs.err.find("runs on its maximum of 2 nodes; this node waits as a spare"), std::string::npos) << rs.err;
  EXPECT_NE(rs.err.find("job 'job' finished before this node got a place in it"), std::string::npos) << rs.err;
  EXPECT_EQ(values_of(rs.out, "COHORT_RANK").size(), 0u);
  EXPECT_EQ(values_of(rh.out, "COHORT_RESTART_COUNT"), (std::vector<std::string>{"0"})) << "the spare re-formed the job";
}

TEST(LauncherElastic, WorkerFailureIsARestartThatCounts) {
  const int port = free_port();
  // Rank 1 (the member's worker) fails in round 0: that is a restart, counted against K = 1.
  const std::vector<std::string> program{ENV_PROBE_BIN, "--exit",  "1:3", "--delay", "300",
                                         "--sleep",     "60",      "--until-restart", "1"};
  Agent a{"host", "2:3", "job", {"--max-restarts", "1", "--rdzv-settle", "0"}};
  Agent m{"member", "2:3", "job", {"--max-restarts", "1", "--rdzv-settle", "0"}};
  Child host(elastic_cmd(port, a, 1, program));
  Child member(elastic_cmd(port, m, 1, program));
  Result rh = host.wait(60), rm = member.wait(60);
  ASSERT_FALSE(rh.timed_out || rm.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(rm.exit_code(), 0) << rm.err;
  for (const Result* r : {&rh, &rm}) {
    EXPECT_NE(r->err.find("round 0 failed: rank 1 (node 1, local rank 0, pid "), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("exited with code 3; restarting the job (restart 1 of 1)"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("job succeeded after 1 restart"), std::string::npos) << r->err;
  }
  // Restarts used up: the same failure ends the job on both nodes.
  const int port2 = free_port();
  const std::vector<std::string> always{ENV_PROBE_BIN, "--exit", "1:3", "--delay", "300", "--sleep", "60"};
  Agent a0{"host", "2:3", "job", {"--rdzv-settle", "0"}};
  Agent m0{"member", "2:3", "job", {"--rdzv-settle", "0"}};
  Child host0(elastic_cmd(port2, a0, 1, always));
  Child member0(elastic_cmd(port2, m0, 1, always));
  Result h0 = host0.wait(60), m0r = member0.wait(60);
  ASSERT_FALSE(h0.timed_out || m0r.timed_out);
  for (const Result* r : {&h0, &m0r}) {
    EXPECT_EQ(r->exit_code(), 1) << r->err;
    EXPECT_NE(r->err.find("job failed: rank 1 (node 1, local rank 0, pid "), std::string::npos) << r->err;
  }
}

TEST(LauncherElastic, LosingTheHostStopsTheOthersWithAClearMessage) {
  TempDir dh, d1, d2;
  const int port = free_port();
  Agent a{"host", "2:3", "job", {}};
  Agent m{"member", "2:3", "job", {}};
  const std::vector<std::string> program{ENV_PROBE_BIN, "--sleep", "120"};
  Child host(elastic_cmd(port, a, 1, program), {"PROBE_DIR=" + dh.path()});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child m1(elastic_cmd(port, m, 1, program), {"PROBE_DIR=" + d1.path()});
  Child m2(elastic_cmd(port, m, 1, program), {"PROBE_DIR=" + d2.path()});
  std::vector<pid_t> w1 = wait_for_pid_files(d1.path(), 1, 30), w2 = wait_for_pid_files(d2.path(), 1, 30);
  ASSERT_EQ(w1.size() + w2.size(), 2u);
  kill(host.pid(), SIGKILL);
  Result r1 = m1.wait(30), r2 = m2.wait(30);
  ASSERT_FALSE(r1.timed_out || r2.timed_out) << "a member hung after losing the host";
  for (const Result* r : {&r1, &r2}) {
    EXPECT_EQ(r->exit_code(), 1) << r->err;
    EXPECT_NE(r->err.find("lost contact with the rendezvous host at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << r->err;
    EXPECT_NE(r->err.find("start the job again with --rdzv-endpoint at a surviving node"), std::string::npos)
        << r->err;
  }
  EXPECT_TRUE(all_gone_within({w1[0], w2[0]}, 10));
}
