// `cohort run` on one machine: every worker gets its own rank and the full environment contract,
// output arrives in whole rank-prefixed lines, and per-rank log files are written.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

// "[r] ENV NAME=VALUE" lines → per-rank maps.
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> env;
  std::regex re(R"(^\[(\d+)\] ENV ([A-Z_]+)=(.*)$)");
  for (const auto& line : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) env[std::stoi(m[1])][m[2]] = m[3];
  }
  return env;
}

}  // namespace

TEST(LauncherEnv, WorkersGetDistinctRanksAndTheEnvironment) {
  TempDir dir;
  const int port = free_port();
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "3", "--master-port", std::to_string(port),
                  "--threads-per-proc", "2", "--log-dir", dir.path() + "/logs", ENV_PROBE_BIN},
                 30);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto env = env_by_rank(r.out);
  ASSERT_EQ(env.size(), 3u) << r.out;
  std::set<std::string> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    auto& e = env[rank];
    const std::string rs = std::to_string(rank);
    EXPECT_EQ(e["COHORT_RANK"], rs);
    EXPECT_EQ(e["RANK"], rs);
    EXPECT_EQ(e["COHORT_LOCAL_RANK"], rs);
    EXPECT_EQ(e["LOCAL_RANK"], rs);
    EXPECT_EQ(e["COHORT_WORLD_SIZE"], "3");
    EXPECT_EQ(e["WORLD_SIZE"], "3");
    EXPECT_EQ(e["COHORT_LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(e["COHORT_NODE_RANK"], "0");
    EXPECT_EQ(e["GROUP_RANK"], "0");
    EXPECT_EQ(e["COHORT_MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(e["COHORT_MASTER_PORT"], std::to_string(port));
    EXPECT_EQ(e["MASTER_PORT"], std::to_string(port));
    EXPECT_EQ(e["COHORT_RESTART_COUNT"], "0");
    EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(e["COHORT_THREADS"], "2");
    EXPECT_EQ(e["OMP_NUM_THREADS"], "2");
    ranks.insert(e["RANK"]);
    // The log file holds this rank's lines, unprefixed.
    std::ifstream log(dir.path() + "/logs/rank" + rs + ".log");
    std::stringstream text;
    text << log.rdbuf();
    EXPECT_NE(text.str().find("ENV COHORT_RANK=" + rs + "\n"), std::string::npos) << "rank " << rank;
  }
  EXPECT_EQ(ranks.size(), 3u);
}

TEST(LauncherEnv, DefaultPortIsChosenAndSharedByAllRanks) {
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "2", "--", ENV_PROBE_BIN}, 30);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto env = env_by_rank(r.out);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0]["MASTER_PORT"], env[1]["MASTER_PORT"]);
  EXPECT_GT(std::stoi(env[0]["MASTER_PORT"]), 0);
}

TEST(LauncherEnv, OutputArrivesInWholePrefixedLines) {
  const int ranks = 4, lines = 300;
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", std::to_string(ranks), "--", ENV_PROBE_BIN, "--lines",
                  std::to_string(lines)},
                 60);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::regex re(R"(^\[(\d)\] line (\d+) of rank (\d) ([a-z])+ end$)");
  std::map<int, int> count;
  for (const auto& line : lines_of(r.out)) {
    if (line.find("] ENV ") != std::string::npos) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << "mixed or broken line: " << line.substr(0, 120);
    EXPECT_EQ(m[1], m[3]) << line.substr(0, 60);
    EXPECT_EQ(line.size(), line.find(" end") + 4);
    ++count[std::stoi(m[1])];
  }
  for (int rank = 0; rank < ranks; ++rank) EXPECT_EQ(count[rank], lines) << "rank " << rank;
}
