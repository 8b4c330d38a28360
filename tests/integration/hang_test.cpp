// `cohort run --hang-timeout S`: hung workers are detected from their heartbeats, every rank writes
// its flight record, and the job restarts like after a crash. Real processes and real signals:
// the Fashion-MNIST example with one worker stopped by SIGSTOP mid-training, a probe whose worker
// gets stuck in its own code, a program without heartbeats, a busy worker. The only time limits
// are generous "no hang" bounds; the detection time is printed, not asserted tightly.
#include <dirent.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "integration/launcher/launcher_test_util.h"

using namespace launcher_test;
using nlohmann::json;

namespace {

bool have_dataset() { return std::ifstream("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").good(); }

// A job in the background, its stdout and stderr going to files that the test reads at any time.
class Job {
 public:
  Job(const std::vector<std::string>& argv, const std::string& dir, const std::string& name = "job")
      : out_(dir + "/" + name + ".out"), err_(dir + "/" + name + ".err") {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      int o = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Job() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }
  /// The exit code, or -1 when it did not end within timeout_s (then it is killed).
  int wait(double timeout_s) {
    const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        reaped_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string out_, err_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

bool wait_until(const std::function<bool()>& ready, double timeout_s) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (!ready()) {
    if (clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The child of `parent` whose environment says COHORT_RANK=rank, or -1.
pid_t worker_pid(pid_t parent, int rank) {
  DIR* proc = opendir("/proc");
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
    if (contains(env, std::string("COHORT_RANK=") + std::to_string(rank) + '\0')) found = pid;
  }
  closedir(proc);
  return found;
}

// A committed checkpoint (its manifest) in dir.
bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (std::filesystem::exists(e.path() / "manifest.json")) return true;
  }
  return false;
}

const json* entry_with_seq(const json& record, const json& seq) {
  for (const auto& e : record["entries"]) {
    if (e["seq"] == seq) return &e;
  }
  return nullptr;
}

}  // namespace

TEST(Hang, AStoppedWorkerIsDetectedEveryRankDumpsAndTheJobResumesFromItsCheckpoint) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir tmp;
  const std::string logs = tmp.path() + "/logs", ckpt = tmp.path() + "/ckpt";
  Job job({COHORT_BIN, "run", "--nproc-per-node", "2", "--threads-per-proc", "1", "--hang-timeout", "3",
           "--max-restarts", "1", "--log-dir", logs, "--", FASHION_MNIST_BIN, "--ckpt-dir", ckpt, "--ckpt-every", "20",
           "--max-steps", "300", "--threads", "1", "--no-eval", "--log-every", "20"},
          tmp.path());
  // Mid-training, with a checkpoint to come back to: stop rank 1 (its heartbeat thread with it).
  ASSERT_TRUE(wait_until([&] { return has_checkpoint(ckpt); }, 120)) << job.err();
  const pid_t victim = worker_pid(job.pid(), 1);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  const auto stopped_at = clock::now();

  // Detected: the running rank's record appears right after the hang is declared.
  const std::string record0 = logs + "/flight-round0-rank0.json", record1 = logs + "/flight-round0-rank1.json";
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(record0); }, 3 + 30)) << job.err();
  const double detected_s = std::chrono::duration<double>(clock::now() - stopped_at).count();
  std::cout << "[ measure  ] hang detected and rank 0's flight record written " << detected_s
            << " s after SIGSTOP (--hang-timeout 3)" << std::endl;

  ASSERT_EQ(job.wait(240), 0) << job.err();
  const std::string out = job.out(), err = job.err();
  // The hang, blamed on the stopped rank, restarted like a crash; the summary points to the dumps.
  EXPECT_TRUE(contains(err, "round 0 failed: rank 1 (node 0, local rank 1, pid " + std::to_string(victim) +
                                ") made no progress for "))
      << err;
  EXPECT_TRUE(contains(err, "sent no heartbeat for")) << err;
  EXPECT_TRUE(contains(err, "restarting the job (restart 1 of 1)")) << err;
  EXPECT_TRUE(contains(err, "cohort run: flight records of round 0: " + record0 + ", " + record1)) << err;
  EXPECT_TRUE(contains(err, "job succeeded after 1 restart")) << err;
  // Round 1 resumed from the checkpoint and finished.
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[0\] resumed from .*step-\d+ \(step [1-9]\d*,)"))) << out;
  EXPECT_EQ(std::regex_search(out, std::regex(R"(\[0\] \{.*"steps":300)")), true) << out;
  EXPECT_EQ(std::regex_search(out, std::regex(R"(\[1\] \{.*"steps":300)")), true) << out;

  // Every rank's flight record, and the stuck collective readable from them.
  ASSERT_TRUE(std::filesystem::exists(record1)) << err;
  const json r0 = json::parse(slurp(record0)), r1 = json::parse(slurp(record1));
  EXPECT_EQ(r0["format"], "cohort-flight-record");
  EXPECT_EQ(r0["rank"], 0);
  EXPECT_EQ(r1["rank"], 1);
  EXPECT_TRUE(contains(r0["reason"].get<std::string>(), "rank 1 (node 0, local rank 1")) << r0["reason"];
  // Rank 0 waits in a DDP bucket's allreduce ...
  ASSERT_FALSE(r0["waiting_in_seq"].is_null()) << slurp(record0);
  const json waiting = r0["waiting_in_seq"];
  const json* stuck = entry_with_seq(r0, waiting);
  ASSERT_NE(stuck, nullptr);
  EXPECT_EQ((*stuck)["op"], "allreduce");
  EXPECT_EQ((*stuck)["what"], "ddp bucket");
  EXPECT_NE((*stuck)["state"], "completed");
  // ... which the stopped rank never completed, nor anything after it: it was continued only once
  // its peer was gone, so its record is its state at the moment it stopped.
  ASSERT_FALSE(r1["last_completed_seq"].is_null()) << slurp(record1);
  EXPECT_LE(r1["last_completed_seq"].get<uint64_t>(), waiting.get<uint64_t>()) << slurp(record1);
  for (const auto& e : r1["entries"]) {
    if (e["seq"].get<uint64_t>() > waiting.get<uint64_t>()) EXPECT_NE(e["state"], "completed") << e;
  }
  EXPECT_LE(r1["step"].get<int64_t>(), r0["step"].get<int64_t>());
  EXPECT_GT(r0["step"].get<int64_t>(), 0);
}

TEST(Hang, AWorkerStuckInItsOwnCodeIsBlamedAndTheRecordsShowWhereEachRankIs) {
  TempDir tmp;
  const std::string logs = tmp.path() + "/logs";
  Job job({COHORT_BIN, "run", "--nproc-per-node", "2", "--hang-timeout", "2", "--max-restarts", "1", "--log-dir",
           logs, "--", HANG_PROBE_BIN, "--steps", "20", "--step-ms", "20", "--stall-rank", "1", "--stall-at", "5"},
          tmp.path());
  ASSERT_EQ(job.wait(120), 0) << job.err();
  const std::string out = job.out(), err = job.err();
  EXPECT_TRUE(contains(out, "[1] rank 1 stalls after step 5")) << out;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(round 0 failed: rank 1 \(node 0, local rank 1, pid \d+\) made no )"
                                                R"(progress for \d+\.\d s \(alive, at step 5, 5 collectives )"
                                                R"(completed; not in a collective)")))
      << err;
  EXPECT_TRUE(contains(out, "[0] done rank 0 steps 20")) << out;
  EXPECT_TRUE(contains(out, "[1] done rank 1 steps 20")) << out;
  // The probe's only recorded collectives are its barriers, one per step: rank 0 waits in the
  // sixth, rank 1 completed the fifth and is in none.
  const json r0 = json::parse(slurp(logs + "/flight-round0-rank0.json"));
  const json r1 = json::parse(slurp(logs + "/flight-round0-rank1.json"));
  EXPECT_EQ(r0["waiting_in_seq"], 6) << r0.dump();
  EXPECT_TRUE(contains(r0["waiting_in"].get<std::string>(), "#6 barrier (gloo): started")) << r0["waiting_in"];
  EXPECT_EQ(r0["last_completed_seq"], 5);
  EXPECT_EQ(r1["last_completed_seq"], 5) << r1.dump();
  EXPECT_TRUE(r1["waiting_in_seq"].is_null()) << r1.dump();
  EXPECT_EQ(r1["step"], 5);
  EXPECT_EQ(r1["reported_step"], 5);
  EXPECT_EQ(r0["step"], 5);
}

TEST(Hang, AProgramThatSendsNoHeartbeatsIsNeverKilled) {
  // env_probe is no cohort program: it never calls cohort::init, so it never sends a heartbeat.
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "2", "--hang-timeout", "1", "--", ENV_PROBE_BIN, "--sleep",
                  "4"},
                 60);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_FALSE(contains(r.err, "made no progress")) << r.err;
}

TEST(Hang, ABusyWorkerThatMakesStepsIsNotKilled) {
  // Each step keeps the CPU busy for 0.6 s, well inside the 1.5 s timeout; 8 steps take 5 s.
  Result r = run({COHORT_BIN, "run", "--nproc-per-node", "2", "--hang-timeout", "1.5", "--", HANG_PROBE_BIN,
                  "--steps", "8", "--step-ms", "600"},
                 120);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_FALSE(contains(r.err, "made no progress")) << r.err;
  EXPECT_TRUE(contains(r.out, "[1] done rank 1 steps 8")) << r.out;
}

TEST(Hang, WithoutRestartsAHangEndsTheJobWithASummaryPointingToTheRecords) {
  TempDir tmp;
  Job job({COHORT_BIN, "run", "--nproc-per-node", "2", "--hang-timeout", "2", "--log-dir", tmp.path() + "/logs", "--",
           HANG_PROBE_BIN, "--steps", "20", "--step-ms", "20", "--stall-rank", "0", "--stall-at", "3"},
          tmp.path());
  ASSERT_EQ(job.wait(120), 1) << job.err();
  const std::string err = job.err();
  EXPECT_TRUE(contains(err, "cohort run: job failed: rank 0 (node 0, local rank 0, pid ")) << err;
  EXPECT_TRUE(contains(err, "  flight records of node 0's ranks (their last collectives): " + tmp.path() +
                                "/logs/flight-round0-rank<R>.json"))
      << err;
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + "/logs/flight-round0-rank1.json"));
}

TEST(Hang, TwoNodesEachWriteTheirRecordsAndRestartTogether) {
  TempDir tmp;
  const int port = free_port_pair();
  std::vector<std::unique_ptr<Job>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(std::make_unique<Job>(
        std::vector<std::string>{COHORT_BIN, "run", "--nnodes", "2", "--node-rank", std::to_string(node),
                                 "--nproc-per-node", "1", "--master-port", std::to_string(port), "--rdzv-timeout",
                                 "30", "--hang-timeout", "2", "--max-restarts", "1", "--log-dir",
                                 tmp.path() + "/logs" + std::to_string(node), "--", HANG_PROBE_BIN, "--steps", "20",
                                 "--step-ms", "20", "--stall-rank", "1", "--stall-at", "4"},
        tmp.path(), "node" + std::to_string(node)));
  }
  for (int node = 0; node < 2; ++node) {
    EXPECT_EQ(nodes[node]->wait(120), 0) << nodes[node]->err();
    EXPECT_TRUE(contains(nodes[node]->err(), "made no progress for")) << nodes[node]->err();
    EXPECT_TRUE(contains(nodes[node]->err(), "job succeeded after 1 restart")) << nodes[node]->err();
  }
  // Each node asked its own worker, whichever node saw the hang first.
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + "/logs0/flight-round0-rank0.json"));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + "/logs1/flight-round0-rank1.json"));
}

TEST(Hang, ANegativeHangTimeoutIsRejected) {
  Result r = run({COHORT_BIN, "run", "--hang-timeout", "-1", "--", ENV_PROBE_BIN}, 30);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_TRUE(contains(r.err, "--hang-timeout must not be negative")) << r.err;
}
