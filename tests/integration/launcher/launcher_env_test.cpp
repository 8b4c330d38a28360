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

namespace {
std::string blas_core_in(const std::string& out) {
  const auto at = out.find("BLAS CORE=");
  return at == std::string::npos ? "" : out.substr(at + 10, out.find('\n', at) - at - 10);
}
}  // namespace

// A worker's OpenBLAS runs kernels for this CPU even where OpenBLAS would fall back to its generic
// Prescott ones (runtime/host/blas_core.h); where it knows the CPU, or the user chose, nothing changes.
TEST(LauncherEnv, WorkersRunOpenBlasKernelsForThisCpu) {
  unsetenv("OPENBLAS_CORETYPE");
  Result alone = run({ENV_PROBE_BIN, "--blas"}, 30);  // what OpenBLAS picks by itself
  const std::string own = blas_core_in(alone.out);
  ASSERT_FALSE(own.empty()) << alone.out;
  if (own == "<none>") GTEST_SKIP() << "no libopenblas.so.0 on this machine";

  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "1", "--", ENV_PROBE_BIN, "--blas"}, 30);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto env = env_by_rank(r.out);
  const std::string worker_core = blas_core_in(r.out);
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool runs_better = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const std::string expected = __builtin_cpu_supports("avx512bf16") ? "Cooperlake"
                               : __builtin_cpu_supports("avx512bw") ? "SkylakeX"
                                                                    : "Haswell";
#else
  const bool runs_better = false;  // OpenBLAS's x86-64 fallback does not exist elsewhere
  const std::string expected;
#endif
  if (own == "Prescott" && runs_better) {
    EXPECT_NE(worker_core, "Prescott") << r.out;
    EXPECT_EQ(env[0]["OPENBLAS_CORETYPE"], worker_core) << r.out;
    EXPECT_EQ(worker_core, expected);
  } else {
    EXPECT_EQ(env[0]["OPENBLAS_CORETYPE"], "<unset>") << r.out;
    EXPECT_EQ(worker_core, own) << r.out;
  }

  Result chosen = run({COHORT_BIN, "run", "--nproc-per-node", "1", "--", ENV_PROBE_BIN, "--blas"}, 30,
                      {"OPENBLAS_CORETYPE=Prescott"});
  ASSERT_EQ(chosen.exit_code(), 0) << chosen.err;
  EXPECT_EQ(env_by_rank(chosen.out)[0]["OPENBLAS_CORETYPE"], "Prescott");
  EXPECT_EQ(blas_core_in(chosen.out), "Prescott") << chosen.out;
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
