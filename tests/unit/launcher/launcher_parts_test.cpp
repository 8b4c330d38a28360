// The launcher's pure parts, in-process: where the program's arguments begin, the worker
// environment, exit descriptions, and the whole-line relay of partial writes.
#include <gtest/gtest.h>

#include <optional>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "launcher/config/cli.h"
#include "launcher/failure_history.h"
#include "launcher/failure_summary.h"
#include "launcher/round.h"
#include "launcher/workers/output_relay.h"
#include "launcher/workers/worker_env.h"

using namespace cohort::launcher;

TEST(LauncherParts, ProgramArgumentsAreNotCohortOptions) {
  CLI::App app;
  RunOptions o;
  CLI::App* run = add_run_command(app, o);
  std::vector<std::string> command;
  auto ours = split_at_program({"run", "--nproc-per-node", "2", "-v", "./train", "--nproc-per-node", "7"}, *run, command);
  EXPECT_EQ(ours, (std::vector<std::string>{"run", "--nproc-per-node", "2", "-v"}));
  EXPECT_EQ(command, (std::vector<std::string>{"./train", "--nproc-per-node", "7"}));

  command.clear();
  ours = split_at_program({"run", "--log-dir=/tmp/x", "--", "-weird-name", "a"}, *run, command);
  EXPECT_EQ(ours, (std::vector<std::string>{"run", "--log-dir=/tmp/x"}));
  EXPECT_EQ(command, (std::vector<std::string>{"-weird-name", "a"}));

  command.clear();
  ours = split_at_program({"run", "--bogus", "prog"}, *run, command);  // CLI11 reports --bogus
  EXPECT_EQ(ours, (std::vector<std::string>{"run", "--bogus"}));
  EXPECT_EQ(command, (std::vector<std::string>{"prog"}));

  // Another subcommand's own "run" keeps its arguments (`cohort sim run --set nodes=2`).
  command.clear();
  const std::vector<std::string> sim = {"sim", "run", "--set", "nodes=2"};
  EXPECT_EQ(split_at_program(sim, *run, command), sim);
  EXPECT_TRUE(command.empty());
}

TEST(LauncherParts, WorkerVariablesOverrideTheInheritedOnes) {
  WorkerPlace p;
  p.job.rank = 5;
  p.job.world_size = 8;
  p.job.local_rank = 1;
  p.job.local_world_size = 4;
  p.job.node_rank = 1;
  p.nnodes = 2;
  p.job.master_addr = "10.0.0.1";
  p.job.master_port = 1234;
  p.threads = 3;
  auto env = merge_environment({"RANK=0", "PATH=/bin", "OMP_NUM_THREADS=16"}, worker_variables(p));
  auto has = [&](const std::string& e) { return std::count(env.begin(), env.end(), e) == 1; };
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_TRUE(has("RANK=5"));
  EXPECT_FALSE(has("RANK=0"));
  EXPECT_TRUE(has("COHORT_RANK=5"));
  EXPECT_TRUE(has("WORLD_SIZE=8"));
  EXPECT_TRUE(has("LOCAL_RANK=1"));
  EXPECT_TRUE(has("LOCAL_WORLD_SIZE=4"));
  EXPECT_TRUE(has("GROUP_RANK=1"));
  EXPECT_TRUE(has("COHORT_NODE_RANK=1"));
  EXPECT_TRUE(has("MASTER_ADDR=10.0.0.1"));
  EXPECT_TRUE(has("MASTER_PORT=1234"));
  EXPECT_TRUE(has("OMP_NUM_THREADS=3"));
  EXPECT_TRUE(has("OPENBLAS_NUM_THREADS=3"));
  EXPECT_TRUE(has("COHORT_THREADS=3"));
  EXPECT_TRUE(has("TORCHELASTIC_RESTART_COUNT=0"));
  EXPECT_TRUE(has("TORCHELASTIC_MAX_RESTARTS=0"));

  p.job.restart_count = 2;
  p.max_restarts = 5;
  env = worker_variables(p);
  EXPECT_TRUE(has("COHORT_RESTART_COUNT=2"));
  EXPECT_TRUE(has("TORCHELASTIC_RESTART_COUNT=2"));
  EXPECT_TRUE(has("TORCHELASTIC_MAX_RESTARTS=5"));
}

// The launcher writes exactly what cohort::init() reads: one contract, checked both ways.
TEST(LauncherParts, WorkerVariablesResolveBackToTheSamePlace) {
  WorkerPlace p;
  p.job.rank = 6;
  p.job.world_size = 9;
  p.job.local_rank = 0;
  p.job.local_world_size = 3;
  p.job.node_rank = 2;
  p.job.master_addr = "node0.example";
  p.job.master_port = 4321;
  p.job.restart_count = 1;
  p.job.store_file = "/tmp/cohort-1-abc/store-1";
  p.nnodes = 3;
  const auto vars = worker_variables(p);
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    for (const auto& v : vars) {
      if (v.rfind(name + "=", 0) == 0) return v.substr(name.size() + 1);
    }
    return std::nullopt;
  };
  const cohort::JobEnv back = cohort::resolve_job_env(lookup);
  EXPECT_EQ(back.source, "cohort");
  EXPECT_EQ(back.rank, p.job.rank);
  EXPECT_EQ(back.world_size, p.job.world_size);
  EXPECT_EQ(back.local_rank, p.job.local_rank);
  EXPECT_EQ(back.local_world_size, p.job.local_world_size);
  EXPECT_EQ(back.node_rank, p.job.node_rank);
  EXPECT_EQ(back.master_addr, p.job.master_addr);
  EXPECT_EQ(back.master_port, p.job.master_port);
  EXPECT_EQ(back.restart_count, p.job.restart_count);
  EXPECT_EQ(back.store_file, p.job.store_file);
}

TEST(LauncherParts, ExitDescriptions) {
  EXPECT_EQ(describe_exit(3 << 8), "exited with code 3");
  EXPECT_TRUE(exited_ok(0));
  EXPECT_FALSE(exited_ok(3 << 8));
  EXPECT_EQ(describe_exit(SIGKILL), "was killed by signal 9 (SIGKILL: Killed)");
  EXPECT_NE(describe_exit(SIGSEGV).find("SIGSEGV"), std::string::npos);
  WorkerFailure f;
  f.who.rank = 3;
  f.who.local_rank = 1;
  f.who.node_rank = 1;
  f.who.pid = 42;
  f.wait_status = 2 << 8;
  f.last_lines = {"a", "b"};
  std::string s = failure_summary(f);
  EXPECT_NE(s.find("rank 3 (node 1, local rank 1, pid 42) exited with code 2"), std::string::npos) << s;
  EXPECT_NE(s.find("    [3] b\n"), std::string::npos) << s;
}

// Only a worker failure restarts, and only while restarts are left.
TEST(LauncherParts, RestartRule) {
  WorkerFailure w;
  w.who.rank = 1;
  w.who.local_rank = 1;
  w.who.pid = 42;
  w.wait_status = 3 << 8;
  w.last_lines = {"bye"};
  Outcome failed{Outcome::worker_failed, "summary\n", 0, round_failure(w, 1)};
  EXPECT_TRUE(decide_round_end(failed, 0, 2).restart);
  EXPECT_TRUE(decide_round_end(failed, 1, 2).restart);
  EXPECT_FALSE(decide_round_end(failed, 2, 2).restart);
  EXPECT_FALSE(decide_round_end(failed, 0, 0).restart);
  Outcome elsewhere = failed;
  elsewhere.kind = Outcome::peer_failed;
  EXPECT_TRUE(decide_round_end(elsewhere, 0, 1).restart);
  for (auto kind : {Outcome::interrupted, Outcome::peer_lost, Outcome::peer_stopped}) {
    Outcome o{kind, "why\n", 2, std::nullopt};
    RoundEnd end = decide_round_end(o, 0, 5);
    EXPECT_FALSE(end.restart) << kind;
    EXPECT_EQ(end.summary, "why\n");
  }
  RoundEnd end = decide_round_end(failed, 0, 1);
  ASSERT_TRUE(end.failure.has_value());
  EXPECT_EQ(end.failure->round(), 1);
  EXPECT_EQ(end.failure->how, "exited with code 3");
  EXPECT_NE(end.failure->summary.find("[1] bye"), std::string::npos);
}

TEST(LauncherParts, FailureHistoryAndNotices) {
  RoundFailure a;
  a.who.restart_count = 0;
  a.who.rank = 3;
  a.who.node_rank = 1;
  a.who.local_rank = 0;
  a.who.pid = 77;
  a.how = "was killed by signal 9 (SIGKILL: Killed)";
  a.time_ms = 1700000000123;
  RoundFailure b = a;
  b.who.restart_count = 1;
  b.who.pid = 78;
  b.how = "exited with code 2";
  EXPECT_EQ(describe_failure(a), "rank 3 (node 1, local rank 0, pid 77) was killed by signal 9 (SIGKILL: Killed)");
  EXPECT_EQ(restart_notice(a, 1, 4), "cohort run: round 0 failed: rank 3 (node 1, local rank 0, pid 77) was killed by "
                                     "signal 9 (SIGKILL: Killed); restarting the job (restart 1 of 4)\n");
  EXPECT_EQ(success_note(0), "cohort run: job succeeded\n");
  EXPECT_EQ(success_note(1), "cohort run: job succeeded after 1 restart\n");
  const std::string h = failure_history({a, b}, 1, 1);
  EXPECT_EQ(h.rfind("cohort run: failure history (1 restart, --max-restarts 1):\n  round 0 at ", 0), 0u) << h;
  EXPECT_NE(h.find(".123: rank 3 (node 1, local rank 0, pid 77) was killed"), std::string::npos) << h;
  EXPECT_NE(h.find("\n  round 1 at "), std::string::npos) << h;
  EXPECT_NE(h.find("pid 78) exited with code 2\n"), std::string::npos) << h;
  EXPECT_EQ(format_wall_time(1700000000005).size(), std::string("2023-11-14 22:13:20.005").size());
  EXPECT_EQ(format_wall_time(1700000000005).substr(19), ".005");
}

TEST(LauncherParts, RelayCompletesPartialLinesAndKeepsTheTail) {
  char templ[] = "/tmp/cohort_relay_XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  const std::string log = std::string(templ) + "/rank7.log";
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK), 0);
  // Keep the test's own stdout clean: relay into a pipe we read back.
  int saved = dup(1), console[2];
  ASSERT_EQ(pipe(console), 0);
  dup2(console[1], 1);
  {
    OutputRelay relay(7, log, 2);
    ASSERT_EQ(write(p[1], "one\ntw", 6), 6);
    EXPECT_TRUE(relay.pump(p[0], OutputRelay::out));
    ASSERT_EQ(write(p[1], "o\nthree\nfour", 12), 12);
    EXPECT_TRUE(relay.pump(p[0], OutputRelay::out));
    close(p[1]);
    EXPECT_FALSE(relay.pump(p[0], OutputRelay::out));
    relay.flush_partial();
    EXPECT_EQ(relay.tail(), (std::deque<std::string>{"three", "four"}));
  }
  dup2(saved, 1);
  close(console[1]);
  char buf[256] = {};
  ssize_t n = read(console[0], buf, sizeof(buf) - 1);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), "[7] one\n[7] two\n[7] three\n[7] four\n");
  FILE* f = fopen(log.c_str(), "r");
  ASSERT_NE(f, nullptr);
  n = static_cast<ssize_t>(fread(buf, 1, sizeof(buf) - 1, f));
  fclose(f);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "one\ntwo\nthree\nfour\n");
  unlink(log.c_str());
  rmdir(templ);
  close(p[0]);
  close(console[0]);
  close(saved);
}
