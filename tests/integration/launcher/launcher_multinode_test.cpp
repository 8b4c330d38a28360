// `cohort run` on several nodes: agents on loopback (fast), and two network namespaces joined by a
// veth pair training the Fashion-MNIST example (the real multi-machine path: distinct addresses,
// the store reached over the "network", Gloo picking the right interface).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <regex>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

std::vector<std::string> node_cmd(int node, int nnodes, int nproc, int port, std::vector<std::string> program,
                                  const std::string& addr = "127.0.0.1") {
  std::vector<std::string> cmd{COHORT_BIN, "run", "--nnodes", std::to_string(nnodes), "--node-rank",
                               std::to_string(node), "--nproc-per-node", std::to_string(nproc), "--master-addr",
                               addr, "--master-port", std::to_string(port), "--rdzv-timeout", "30", "--"};
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

// Runs node 1's and node 0's `cohort run` (node(n) gives each command line); both must end with
// exit status 0 within 240 s.
void run_two_nodes(const std::function<std::vector<std::string>(int)>& node, Result& r0, Result& r1) {
  Child n1(node(1));
  Child n0(node(0));
  r0 = n0.wait(240);
  r1 = n1.wait(240);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  ASSERT_EQ(r0.exit_code(), 0) << r0.out << r0.err;
  ASSERT_EQ(r1.exit_code(), 0) << r1.out << r1.err;
}

}  // namespace

TEST(LauncherMultiNode, LoopbackAgentsNumberRanksNodeByNode) {
  const int port = free_port_pair();
  // Node 1 starts first: it must wait for node 0. Different worker counts per node are allowed.
  Child n1(node_cmd(1, 2, 2, port, {ENV_PROBE_BIN}));
  Child n0(node_cmd(0, 2, 1, port, {ENV_PROBE_BIN}));
  Result r0 = n0.wait(30), r1 = n1.wait(30);
  ASSERT_EQ(r0.exit_code(), 0) << r0.err;
  ASSERT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_NE(r0.out.find("[0] ENV COHORT_RANK=0\n"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("[0] ENV COHORT_WORLD_SIZE=3\n"), std::string::npos);
  EXPECT_NE(r1.out.find("[1] ENV COHORT_RANK=1\n"), std::string::npos) << r1.out;
  EXPECT_NE(r1.out.find("[1] ENV COHORT_LOCAL_RANK=0\n"), std::string::npos);
  EXPECT_NE(r1.out.find("[2] ENV COHORT_RANK=2\n"), std::string::npos);
  EXPECT_NE(r1.out.find("[2] ENV COHORT_NODE_RANK=1\n"), std::string::npos);
  EXPECT_NE(r1.out.find("[2] ENV COHORT_LOCAL_WORLD_SIZE=2\n"), std::string::npos);
  EXPECT_NE(r1.out.find("[2] ENV COHORT_WORLD_SIZE=3\n"), std::string::npos);
}

TEST(LauncherMultiNode, FailureOnOneNodeStopsTheOther) {
  TempDir dir;
  const int port = free_port_pair();
  // Global rank 2 (node 1) exits with code 3; node 0's worker would otherwise sleep for minutes.
  Child n0(node_cmd(0, 2, 2, port, {ENV_PROBE_BIN, "--exit", "2:3", "--delay", "500", "--sleep", "120"}),
           {"PROBE_DIR=" + dir.path()});
  Child n1(node_cmd(1, 2, 1, port, {ENV_PROBE_BIN, "--exit", "2:3", "--delay", "500", "--sleep", "120"}),
           {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 3, 20);
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_TRUE(all_gone_within({pids[2]}, 10));
  EXPECT_TRUE(all_gone_within(pids, 5)) << "node 0's workers survived a failure on node 1";
  Result r0 = n0.wait(10), r1 = n1.wait(10);
  EXPECT_NE(r0.exit_code(), 0);
  EXPECT_NE(r1.exit_code(), 0);
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->err.find("rank 2 (node 1"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("exited with code 3"), std::string::npos) << r->err;
  }
}

TEST(LauncherMultiNode, LosingNodeZeroStopsTheOthers) {
  TempDir dir;
  const int port = free_port_pair();
  Child n0(node_cmd(0, 2, 1, port, {ENV_PROBE_BIN, "--sleep", "120"}), {"PROBE_DIR=" + dir.path()});
  Child n1(node_cmd(1, 2, 1, port, {ENV_PROBE_BIN, "--sleep", "120"}), {"PROBE_DIR=" + dir.path()});
  std::vector<pid_t> pids = wait_for_pids(dir.path(), 2, 20);
  ASSERT_EQ(pids.size(), 2u);
  kill(n0.pid(), SIGKILL);  // node 0's agent vanishes (its worker dies with it)
  Result r1 = n1.wait(15);
  ASSERT_FALSE(r1.timed_out);
  EXPECT_NE(r1.exit_code(), 0);
  EXPECT_NE(r1.err.find("lost contact with node 0"), std::string::npos) << r1.err;
  EXPECT_TRUE(all_gone_within(pids, 5));
}

TEST(LauncherMultiNode, TwoLoopbackNodesOfTwoRanksTrainThroughTheHierarchicalAllreduceWithPowerSGD) {
  // Ranks 0-1 and 2-3 are two nodes (shared memory inside each, Gloo between): the example's DDP
  // picks the hierarchical allreduce by itself; PowerSGD's P and Q go through it.
  const int port = free_port_pair();
  auto node = [&](int n) {
    return node_cmd(n, 2, 2, port,
                    {FASHION_MNIST_BIN, "--model", "mlp", "--batch-size", "16", "--max-steps", "8", "--warmup-steps",
                     "2", "--no-eval", "--threads", "1", "--comm-hook", "powersgd", "--powersgd-rank", "2",
                     "--powersgd-start", "3"});
  };
  Result r0, r1;
  ASSERT_NO_FATAL_FAILURE(run_two_nodes(node, r0, r1));
  std::set<std::string> checksums;
  int results = 0;
  for (const std::string& out : {r0.out, r1.out}) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const auto brace = line.find('{');
      if (brace == std::string::npos || line.find("param_checksum") == std::string::npos) continue;
      const auto j = nlohmann::json::parse(line.substr(brace));
      EXPECT_EQ(j["allreduce"], "hierarchical") << line;
      EXPECT_EQ(j["comm_hook"], "powersgd") << line;
      checksums.insert(j["param_checksum"].dump());
      ++results;
    }
  }
  EXPECT_EQ(results, 4) << r0.out << r1.out;
  EXPECT_EQ(checksums.size(), 1u) << "ranks ended with different parameters:\n" << r0.out << r1.out;
}

// The fp16 hook over the hierarchical allreduce: each step's `compression` in the event log is the
// hook's own, 2 (the bytes handed to it over the bytes it handed to its collectives), not the 0.8
// it was over every gradient collective's bytes, the float ones inside each node included.
TEST(LauncherMultiNode, TheFp16HooksCompressionThroughTheHierarchyIsItsOwn) {
  const int port = free_port_pair();
  const std::string dir = "/tmp/cohort-multinode-compression-" + std::to_string(getpid());
  auto node = [&](int n) {
    auto c = node_cmd(n, 2, 2, port,
                      {FASHION_MNIST_BIN, "--model", "mlp", "--batch-size", "16", "--max-steps", "6", "--warmup-steps",
                       "2", "--no-eval", "--threads", "1", "--comm-hook", "fp16"});
    if (n == 0) c.insert(c.begin() + 2, {"--log-dir", dir});
    return c;
  };
  Result r0, r1;
  ASSERT_NO_FATAL_FAILURE(run_two_nodes(node, r0, r1));
  std::ifstream log(dir + "/events.jsonl");
  int records = 0;
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("type", "") != "metrics" || !j.contains("compression")) continue;
    EXPECT_NEAR(j["compression"].get<double>(), 2.0, 0.01) << line;
    ++records;
  }
  EXPECT_EQ(records, 4 * 6) << "every rank's every step carries it";
  std::filesystem::remove_all(dir);
}

// Node 0 decides about restarts and repairs for every node: a node started with other rules
// (--keep-survivors on one node only, another --max-restarts) is refused with one line naming both,
// before any worker starts.
TEST(LauncherMultiNode, NodesThatDisagreeOnKeepSurvivorsAreRefused) {
  const int port = free_port_pair();
  auto cmd = [&](int node, std::vector<std::string> flags) {
    auto c = node_cmd(node, 2, 1, port, {ENV_PROBE_BIN});
    c.insert(c.begin() + 2, flags.begin(), flags.end());
    return c;
  };
  Child n0(cmd(0, {"--max-restarts", "3", "--keep-survivors"}));
  Child n1(cmd(1, {"--max-restarts", "2"}));
  Result r0 = n0.wait(30), r1 = n1.wait(30);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 2) << r0.err;
  EXPECT_NE(r1.exit_code(), 0) << r1.err;
  const std::string why = "node 1 was started with --max-restarts 2 (no --keep-survivors) but node 0 with "
                          "--max-restarts 3 --keep-survivors; start every node with the same";
  EXPECT_NE(r0.err.find(why), std::string::npos) << r0.err;
  EXPECT_NE(r1.err.find(why), std::string::npos) << r1.err;
  EXPECT_EQ(r0.out.find("ENV"), std::string::npos) << "a worker started:\n" << r0.out;
}
