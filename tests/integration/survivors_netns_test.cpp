// Survivors keep running on two machines (issue 19): two "nodes" as network namespaces joined by a
// veth pair, two ranks each, under `cohort run --keep-survivors`. Node 0's agent hosts the
// workers' store (cohort-store), so any rank — rank 0 included — can be replaced alone: the agent
// whose worker failed asks node 0, node 0 numbers the generation and tells every node, and the
// ranks on both machines re-form their groups (hierarchical allreduce: shared memory inside a
// node, Gloo between them) around the replacement. Real processes, the Fashion-MNIST example.
// Needs root and iproute2; skipped with the reason otherwise.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/netns.h"
#include "support/recovery_jobs.h"

namespace fs = std::filesystem;
using namespace cohort::testing;
using namespace cohort::testing::recovery;

namespace {

const std::string kToken = "COHORT_JOB_TOKEN=cohort-tests-job-token-0123456789abcdef";

struct TwoNodes {
  std::string skip;  // why the test cannot run here, else empty
  std::unique_ptr<NamespacePair> ns;
  fs::path dir;

  TwoNodes() {
    const std::string ip = find_ip_tool();
    if (geteuid() != 0) skip = "needs root to create network namespaces";
    else if (ip.empty()) skip = "needs iproute2 (ip netns); scripts/setup.sh installs it";
    else if (!have_dataset()) skip = "dataset-fashion-mnist is not installed";
    if (!skip.empty()) return;
    ns = std::make_unique<NamespacePair>(ip, "sv", "10.79.0");
    dir = fs::temp_directory_path() / ("cohort_survivors_netns_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TwoNodes() {
    if (!dir.empty()) fs::remove_all(dir);
  }

  // Node `n`'s `cohort run` of the job `name` (its checkpoints in <dir>/<name><n>).
  std::string node(int n, const std::string& name, const std::string& flags, const std::string& example_args) const {
    return "env " + kToken + " " +
           ns->shell_in(n == 0, kCohort + " run --nnodes 2 --node-rank " + std::to_string(n) +
                                    " --nproc-per-node 2 --master-addr 10.79.0.1 --master-port 29700 --rdzv-timeout 60"
                                    " --threads-per-proc 1 --no-dashboard" + flags + " -- " + kExample + " --ckpt-dir " +
                                    ckpt(name, n) + example_args);
  }
  std::string ckpt(const std::string& name, int n) const { return (dir / (name + std::to_string(n))).string(); }
  std::string log(const std::string& name, int n) const { return (dir / (name + std::to_string(n) + ".log")).string(); }
};

// `faults` times one of the four training workers, on either node, gets `sig` at a random moment
// once the job trains again; the job must end bitwise where an uninterrupted run does, with no
// full restart, the other three workers of each fault the same processes, and each recovery at
// most one step back, from an in-memory snapshot.
void expect_two_nodes_keep_running(int sig, int faults, const std::string& launcher_flags) {
  TwoNodes t;
  if (!t.skip.empty()) GTEST_SKIP() << t.skip;
  ASSERT_TRUE(t.ns->ok()) << "could not create the namespaces and veth pair";
  const std::string args = " --no-eval --threads 1 --log-every 0 " + kSteps + " --report-first-step";
  {
    Job n1(t.node(1, "straight", "", args), t.log("straight", 1));
    Job n0(t.node(0, "straight", "", args), t.log("straight", 0));
    ASSERT_EQ(n0.wait(), 0) << read_all(t.log("straight", 0));
    ASSERT_EQ(n1.wait(), 0) << read_all(t.log("straight", 1));
  }
  const std::string expected = final_state(read_all(t.log("straight", 0))) + final_state(read_all(t.log("straight", 1)));
  ASSERT_EQ(expected.size(), 4 * 34u) << read_all(t.log("straight", 0));

  const std::string flags = " --max-restarts 8 --keep-survivors --warm-spares" + launcher_flags;
  const std::string faulty_args = " --snapshot-every 1" + args;
  Job n1(t.node(1, "faulty", flags, faulty_args), t.log("faulty", 1));
  Job n0(t.node(0, "faulty", flags + " --run-dir " + (t.dir / "run").string(), faulty_args), t.log("faulty", 0));
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<int> after_ms(300, 1200);
  std::vector<pid_t> survivors;  // the last fault's three other workers
  auto training_on_both = [&] {
    auto pids = training_workers(t.ckpt("faulty", 0));
    for (pid_t p : training_workers(t.ckpt("faulty", 1))) pids.push_back(p);
    return pids;
  };
  auto expect_survivors_train = [&](const std::vector<pid_t>& training) {
    for (pid_t p : survivors)
      EXPECT_NE(std::find(training.begin(), training.end(), p), training.end()) << "survivor " << p << " is gone";
  };
  int sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (sent < faults && n0.running() && n1.running() && std::chrono::steady_clock::now() < deadline) {
    // The job trains again after the last fault (rank 0 printed one more first step).
    if (count(read_all(n0.log), "first_step_unix_ns") < static_cast<size_t>(sent + 1)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms(rng)));
    // Node 1 first, then node 0, in turn: a member asks node 0, node 0 decides alone.
    const auto on_node = training_workers(t.ckpt("faulty", 1 - sent % 2));
    const auto training = training_on_both();
    if (on_node.size() != 2 || training.size() != 4) continue;
    expect_survivors_train(training);
    const pid_t victim = on_node[rng() % 2];
    ::kill(victim, sig);
    survivors.clear();
    for (pid_t p : training)
      if (p != victim) survivors.push_back(p);
    ++sent;
  }
  while (n0.running() && count(read_all(n0.log), "first_step_unix_ns") < static_cast<size_t>(faults + 1))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (n0.running() && n1.running()) expect_survivors_train(training_on_both());
  const int code0 = n0.wait(), code1 = n1.wait();
  const std::string out0 = read_all(n0.log), out1 = read_all(n1.log), both = out0 + out1;
  ASSERT_EQ(sent, faults) << "the job ended before the last fault:\n" << both;
  EXPECT_EQ(code0, 0) << both;
  EXPECT_EQ(code1, 0) << both;
  EXPECT_EQ(count(both, "while the other ranks keep running"), static_cast<size_t>(faults)) << both;
  EXPECT_FALSE(contains(both, "restarting the job")) << "a full restart happened:\n" << both;
  const std::string events_path = (t.dir / "run" / "events.jsonl").string();
  const std::string events = read_all(events_path);
  const auto lost = steps_lost_per_restore(events_path);
  ASSERT_EQ(lost.size(), static_cast<size_t>(faults)) << events;
  for (size_t i = 0; i < lost.size(); ++i) EXPECT_LE(lost[i], 1) << "recovery " << i + 1 << " went back " << lost[i] << " steps";
  EXPECT_EQ(count(events, "\"kind\":\"replaced\""), static_cast<size_t>(faults)) << events;
  size_t from_snapshots = 0;
  for (const auto& line : cohort::testing::lines(events))
    if (contains(line, "\"kind\":\"recovered\"") && contains(line, "\"source\":\"snapshot\"")) ++from_snapshots;
  EXPECT_EQ(from_snapshots, static_cast<size_t>(faults)) << events;
  EXPECT_EQ(final_state(out0) + final_state(out1), expected) << "parameters or momentum differ from the uninterrupted run:\n" << both;
}

TEST(SurvivorsNetns, TwoNodesOfTwoRanksKeepRunningThroughFiveSigkillsWithTheUninterruptedRunsResult) {
  expect_two_nodes_keep_running(SIGKILL, 5, "");
}

TEST(SurvivorsNetns, TwoNodesOfTwoRanksKeepRunningThroughHangs) {
  expect_two_nodes_keep_running(SIGSTOP, 2, " --hang-timeout 3");
}

}  // namespace
