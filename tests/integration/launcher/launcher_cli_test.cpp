// `cohort run` with bad input: each case is one line on stderr, a non-zero exit and no hang.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

// Bad input ends fast with exactly one line on stderr that mentions `needle`.
void expect_one_line_error(const Result& r, const std::string& needle) {
  EXPECT_FALSE(r.timed_out) << "cohort run hung";
  EXPECT_NE(r.exit_code(), 0);
  EXPECT_NE(r.exit_code(), -1) << "killed by a signal";
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace

TEST(LauncherCli, UnknownFlag) {
  expect_one_line_error(run({COHORT_BIN, "run", "--no-such-flag", "--", ENV_PROBE_BIN}, 10), "--no-such-flag");
}

TEST(LauncherCli, BadOptionValue) {
  expect_one_line_error(run({COHORT_BIN, "run", "--nproc-per-node", "many", ENV_PROBE_BIN}, 10), "nproc");
}

TEST(LauncherCli, MissingProgramArgument) {
  expect_one_line_error(run({COHORT_BIN, "run", "--nproc-per-node", "2"}, 10), "no program");
}

TEST(LauncherCli, ProgramDoesNotExist) {
  expect_one_line_error(run({COHORT_BIN, "run", "--", "/nonexistent/cohort-no-such-program"}, 10), "not found");
  expect_one_line_error(run({COHORT_BIN, "run", "cohort-no-such-program-on-path"}, 10), "not found");
}

TEST(LauncherCli, ProgramIsNotExecutable) {
  TempDir dir;
  std::string script = dir.path() + "/train.sh";
  std::ofstream(script) << "#!/bin/sh\necho hi\n";
  chmod(script.c_str(), 0644);
  expect_one_line_error(run({COHORT_BIN, "run", "--", script}, 10), "not executable");
}

TEST(LauncherCli, BadMaxRestarts) {
  expect_one_line_error(run({COHORT_BIN, "run", "--max-restarts", "-1", ENV_PROBE_BIN}, 10), "--max-restarts -1");
  expect_one_line_error(run({COHORT_BIN, "run", "--max-restarts", "x", ENV_PROBE_BIN}, 10), "--max-restarts");
  expect_one_line_error(run({COHORT_BIN, "run", "--max_restarts", "1.5", ENV_PROBE_BIN}, 10), "--max-restarts");
  expect_one_line_error(run({COHORT_BIN, "run", "--warm-spares", ENV_PROBE_BIN}, 10), "--warm-spares");
  expect_one_line_error(run({COHORT_BIN, "run", "--keep-survivors", ENV_PROBE_BIN}, 10), "--keep-survivors");
}

// Every numeric option is range-checked (issue 22): no negative counts, no NaN, no infinity.
TEST(LauncherCli, NumbersOutOfRangeAreOneLineErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--nproc-per-node", "-1"}, "--nproc-per-node"},
      {{"--nproc-per-node", "0"}, "--nproc-per-node"},
      {{"--nproc-per-node", "100000"}, "--nproc-per-node"},
      {{"--threads-per-proc", "100000"}, "--threads-per-proc"},
      {{"--threads-per-proc", "-1"}, "--threads-per-proc"},
      {{"--rdzv-timeout", "inf"}, "--rdzv-timeout"},
      {{"--rdzv-timeout", "nan"}, "--rdzv-timeout"},
      {{"--rdzv-timeout", "0"}, "--rdzv-timeout"},
      {{"--stop-timeout", "nan"}, "--stop-timeout"},
      {{"--hang-timeout", "inf"}, "--hang-timeout"},
      {{"--hang-timeout", "-2"}, "--hang-timeout"},
      {{"--stall-timeout", "nan"}, "--stall-timeout"},
      {{"--straggler-factor", "nan"}, "--straggler-factor"},
      {{"--straggler-factor", "inf"}, "--straggler-factor"},
      {{"--tail-lines", "-5"}, "--tail-lines"},
      {{"--max-restarts", "99999999"}, "--max-restarts"},
      // Issue 50: a timeout of a nanosecond fires at once (--hang-timeout killed a healthy job);
      // -1, the default's internal value for "a free port", must not be taken from the user.
      {{"--hang-timeout", "1e-9"}, "--hang-timeout 1e-09: at least 1 s (0 turns it off)"},
      {{"--stall-timeout", "0.001"}, "--stall-timeout 0.001: at least 1 s (0 turns it off)"},
      {{"--rdzv-timeout", "0.01"}, "--rdzv-timeout 0.01: at least 1 s"},
      {{"--node-timeout", "1e-9", "--nnodes", "1:2", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-id", "j"},
       "--node-timeout 1e-09: at least 1 s"},
      {{"--master-port", "-1"}, "--master-port: '-1' is not a TCP port (1..65535)"},
      {{"--master-port", "0"}, "--master-port: '0' is not a TCP port (1..65535)"},
      {{"--master-port", "65536"}, "--master-port: '65536' is not a TCP port (1..65535)"},
  };
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> cmd{COHORT_BIN, "run"};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    cmd.push_back(ENV_PROBE_BIN);
    SCOPED_TRACE(flags[0] + " " + flags[1]);
    expect_one_line_error(run(cmd, 10), needle);
  }
}

TEST(LauncherCli, NodeRankOutOfRange) {
  expect_one_line_error(run({COHORT_BIN, "run", "--nnodes", "2", "--node-rank", "2", ENV_PROBE_BIN}, 10),
                        "--node-rank 2");
  expect_one_line_error(run({COHORT_BIN, "run", "--nnodes", "2", "--node-rank", "-1", ENV_PROBE_BIN}, 10),
                        "--node-rank -1");
}

TEST(LauncherCli, MasterThatNeverAnswersTimesOut) {
  // Node 1 waits for node 0 at a loopback port nobody listens on.
  const int port = free_port_pair();
  Result r = run({COHORT_BIN, "run", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1", "--master-addr",
                  "127.0.0.1", "--master-port", std::to_string(port), "--rdzv-timeout", "1.5", ENV_PROBE_BIN},
                 20);
  expect_one_line_error(r, "could not reach node 0");
}

TEST(LauncherCli, NodesThatNeverJoinTimeOut) {
  // Node 0 waits for a node 1 that is never started.
  const int port = free_port_pair();
  Result r = run({COHORT_BIN, "run", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", "--master-port",
                  std::to_string(port), "--rdzv-timeout", "1.5", ENV_PROBE_BIN},
                 20);
  expect_one_line_error(r, "missing node ranks 1");
}

TEST(LauncherCli, MasterAddressNotOnThisMachine) {
  // Node 0 must own --master-addr; 192.0.2.1 (TEST-NET-1, never routed) is no address of ours.
  // Nothing is sent: binding fails locally.
  Result r = run({COHORT_BIN, "run", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", "--master-addr",
                  "192.0.2.1", "--master-port", "29500", "--rdzv-timeout", "1", ENV_PROBE_BIN},
                 20);
  expect_one_line_error(r, "not an address of this machine");
}
