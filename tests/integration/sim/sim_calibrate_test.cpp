// `cohort sim calibrate` and `predict` on real runs (issue 17): the Fashion-MNIST CNN trained by
// `cohort run` on 1, 2, 3 and 4 local ranks, and a job whose rank is killed three times; what the
// calibration reads off their logs and how predict reports. And the logs it must refuse, one clear
// line each. The accuracy of the predictions is measured by bench/sim/sim_predict.sh (docs/BENCHMARKS.md):
// it is timing, and a loaded machine moves it. No torch in this file.
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "support/subprocess.h"

using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)
using nlohmann::json;

extern char** environ;

namespace {

const std::string kCli = COHORT_CLI;
const std::string kExample = COHORT_FASHION_MNIST;
// The real runs here calibrate with --allow-load: the suite runs two tests at a time (and CI builds
// the second libtorch beside it), so other work shares the machine with them, which calibrate
// otherwise leaves out or refuses (sim_calibrate_load_test.cpp tests that). predict notes that load
// on stderr: the JSON it prints is read from stdout alone.

std::string fresh_dir(const std::string& tag) {
  const std::string d = "/tmp/cohort-sim-calibrate-" + tag + "-" + std::to_string(::getpid());
  run_shell("rm -rf " + d + " && mkdir -p " + d);
  return d;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A 2-rank job with checkpoints whose rank is SIGKILLed three times, each once its round passed a
// step (70, 100, 130); it restarts (--max-restarts 3) from its checkpoint each time and finishes.
std::string killed_run(const std::string& dir) {
  const std::string ckpt = dir + "-ckpt";
  const std::string shell = kCli + " run --nproc-per-node 2 --max-restarts 3 --log-dir " + dir + " -- " + kExample +
                            " --ckpt-dir " + ckpt + " --ckpt-every 40 --max-steps 240 --no-eval >" + dir + ".out 2>&1";
  const char* argv[] = {"/bin/sh", "-c", shell.c_str(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) return "";
  int kills = 0;
  for (int i = 0; i < 1200 && kills < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::istringstream log(read_all(dir + "/events.jsonl"));
    long long top = 0;  // the highest step of this round (its metrics' "restart" is the kills so far)
    for (std::string line; std::getline(log, line);) {
      const json m = json::parse(line, nullptr, false);
      if (m.is_object() && m.value("type", "") == "metrics" && m.value("restart", -1) == kills) top = std::max(top, m.value("step", 0LL));
    }
    if (top <= 70 + 30 * kills) continue;
    std::istringstream pids(run_shell("pgrep -f -- '^" + kExample + " --ckpt-dir " + ckpt + " '").output);
    if (pid_t p; pids >> p) {
      ::kill(p, SIGKILL);
      ++kills;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_EQ(kills, 3) << read_all(dir + ".out");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_all(dir + ".out");
  return dir;
}

}  // namespace

// Runs of 1..4 ranks, made once for the suite (about a minute). Outside the anonymous namespace:
// its tests derive from it, and GCC warns about a base of internal linkage (-Wsubobject-linkage).
class SimCalibrate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fresh_dir("runs"));
    for (int n = 1; n <= 4; ++n) {
      const auto r = run_shell(kCli + " run --nproc-per-node " + std::to_string(n) + " --log-dir " + *dir_ + "/r" +
                               std::to_string(n) + " -- " + kExample + " --max-steps 150 --no-eval");
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    run_shell("rm -rf " + *dir_);
    delete dir_;
  }
  static std::string run(int n) { return *dir_ + "/r" + std::to_string(n); }
  static std::string* dir_;
};
std::string* SimCalibrate::dir_ = nullptr;

// The runs' step times as calibrate reads them (its summary of each log).
std::vector<double> summarized_steps(const std::string& runs) {
  const auto r = run_shell(kCli + " sim calibrate --allow-load " + runs + " 2>/dev/null");
  std::vector<double> out;
  for (const auto& run : json::parse(r.output, nullptr, false).value("runs", json::array())) out.push_back(run.value("step_s", 0.0));
  return out;
}

// A calibration fitted on the 1- and 2-rank runs predicts all four: each measured time is the
// log's, the error is predicted / measured - 1, the oversubscribed runs are predicted slower (the
// model's CPU contention), and the exit status says whether every run was within the tolerance.
// How close the predictions come is timing, a benchmark's business: bench/sim/sim_predict.sh.
TEST_F(SimCalibrate, FittedOnOneAndTwoRanksItPredictsEveryRun) {
  const std::string cal = *dir_ + "/calibration.json";
  const auto c = run_shell(kCli + " sim calibrate --allow-load " + run(1) + " " + run(2) + " -o " + cal);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::string all = run(1) + " " + run(2) + " " + run(3) + " " + run(4);
  const std::vector<double> measured = summarized_steps(all);
  ASSERT_EQ(measured.size(), 4u);
  const auto p = run_shell(kCli + " sim predict --json --tolerance 1e9 --calibration " + cal + " " + all + " 2>/dev/null");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  const json j = json::parse(p.output, nullptr, false);
  ASSERT_TRUE(j.is_array()) << p.output;
  ASSERT_EQ(j.size(), 4u);
  std::vector<double> predicted;
  for (int i = 0; i < 4; ++i) {
    const json& r = j[i];
    std::cout << "  " << r["world"] << " ranks: measured " << r["measured_step_s"].get<double>() * 1000 << " ms, predicted "
              << r["predicted_step_s"].get<double>() * 1000 << " ms (" << r["step_error"].get<double>() * 100 << " %)\n";
    EXPECT_EQ(r["world"].get<int>(), i + 1) << r.dump();
    EXPECT_EQ(r["measured_step_s"].get<double>(), measured[i]) << r.dump();
    const double pr = r["predicted_step_s"].get<double>();
    EXPECT_TRUE(std::isfinite(pr) && pr > 0) << r.dump();
    EXPECT_NEAR(r["step_error"].get<double>(), pr / measured[i] - 1, 1e-12) << r.dump();
    EXPECT_TRUE(r["within"].get<bool>()) << r.dump();
    predicted.push_back(pr);
  }
  EXPECT_LT(predicted[1], predicted[2]) << "3 ranks on 2 cores share them: " << j.dump();
  EXPECT_LT(predicted[2], predicted[3]) << "4 ranks on 2 cores share them more: " << j.dump();
  const auto strict = run_shell(kCli + " sim predict --json --tolerance 0 --calibration " + cal + " " + run(3) + " 2>/dev/null");
  EXPECT_EQ(strict.exit_code, 1) << "a run outside the tolerance fails predict: " << strict.output;
  const json s3 = json::parse(strict.output, nullptr, false);
  ASSERT_TRUE(s3.is_array() && s3.size() == 1u) << strict.output;
  EXPECT_FALSE(s3[0]["within"].get<bool>()) << strict.output;
  // Each run's threads per worker, as cohort run logged them in its start event: cores / ranks.
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const json runs = json::parse(run_shell(kCli + " sim calibrate --allow-load " + all + " 2>/dev/null").output, nullptr, false)["runs"];
  ASSERT_EQ(runs.size(), 4u) << runs.dump();
  for (int n = 1; n <= 4; ++n) EXPECT_EQ(runs[n - 1].value("threads", 0), std::max(1, CPU_COUNT(&set) / n)) << runs.dump();
  // The calibration is also a parameter file for run: its shape is the first run's.
  const auto s = run_shell(kCli + " sim run --no-series --params " + cal + " --set hours=0.01");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(json::parse(s.output)["world"].get<int>(), 1);
}

// The recovery time (a failure to the next round's first step: detection, restart, restore and
// the first step) is read off a killed run's log, one per failure, their median the calibration's
// restart time; predict adds the restore of the job's checkpoint. (How well one run's predicts
// another's: bench/sim/sim_predict.sh.)
TEST(SimCalibrateRecovery, AKilledRunsRecoveriesAreReadAndPredicted) {
  const std::string d = fresh_dir("recovery");
  const std::string a = killed_run(d + "/a");
  const std::string cal = d + "/calibration.json";
  const auto c = run_shell(kCli + " sim calibrate --allow-load " + a + " -o " + cal);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const json calibration = json::parse(read_all(cal), nullptr, false);
  ASSERT_TRUE(calibration.is_object()) << read_all(cal);
  const json run = calibration["runs"][0];
  std::vector<double> rec = run.value("recoveries", std::vector<double>{});
  std::cout << "  recoveries " << run.value("recoveries", json::array()).dump() << " s\n";
  ASSERT_EQ(rec.size(), 3u) << run.dump();
  for (double r : rec) EXPECT_GT(r, 0.1) << "a restart takes a new process, a rendezvous and a restore: " << run.dump();
  std::sort(rec.begin(), rec.end());
  EXPECT_EQ(run["recovery_s"].get<double>(), rec[1]) << run.dump();
  EXPECT_EQ(calibration["params"]["restart_s"].get<double>(), rec[1]) << calibration.dump();
  EXPECT_EQ(calibration["params"]["detect_s"].get<double>(), 0.0) << "the log holds detection within the recovery";
  const auto p = run_shell(kCli + " sim predict --json --tolerance 1e9 --calibration " + cal + " " + a + " 2>/dev/null");
  EXPECT_EQ(p.exit_code, 0) << p.output;
  const json j = json::parse(p.output, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 1u) << p.output;
  const json& r = j[0];
  std::cout << "  recovery: " << r["measured_recovery_s"].get<double>() << " s measured, "
            << r["predicted_recovery_s"].get<double>() << " s predicted\n";
  EXPECT_EQ(r["measured_recovery_s"].get<double>(), rec[1]) << r.dump();
  const double predicted = r["predicted_recovery_s"].get<double>();
  EXPECT_GE(predicted, rec[1]) << "the restart, then the restore: " << r.dump();
  EXPECT_LT(predicted, rec[1] + 1.0) << "restoring the CNN's checkpoint takes milliseconds: " << r.dump();
  if (!HasFailure()) run_shell("rm -rf " + d);
}

// Each link level from its own runs: a one-node job's collectives give the link inside a node, a
// two-node job's the network's; and when backward makes its gradient bytes, from the run whose
// collectives are link-bound (its first bucket's start: backward + exposed - busy). Synthetic logs
// of known numbers, so the fit is checked exactly; the calibrated simulator then reproduces the
// link-bound run it was fitted on (with the bytes spread evenly over backward it would not).
TEST(SimCalibrateLinks, EachLevelFromItsRunsAndTheGradientsTimingFromLinkBoundOnes) {
  const std::string d = fresh_dir("links");
  // Two buckets (1 MiB, then the rest at backward's end); the first still busy when backward ends.
  const double bytes = 1.5e6, backward = 0.3, busy = 0.4, x = 1048576.0 / bytes;
  const double exposed = busy - backward + x * x * backward;  // the first bucket started x^2 into backward
  auto log = [&](const std::string& name, int nodes, double comm_s, double wait) {
    std::ofstream out(d + "/" + name + "/events.jsonl");
    for (int step = 1; step <= 40; ++step) {
      for (int rank = 0; rank < 2; ++rank) {
        const double step_s = 0.001 + 0.1 + backward + wait + 0.001;
        const json m = {{"type", "metrics"}, {"rank", rank}, {"world_size", 2}, {"node", nodes > 1 ? rank : 0},
                        {"step", step}, {"t", 1000 + step * step_s}, {"step_s", step_s},
                        {"phases", {{"data", 0.001}, {"forward", 0.1}, {"backward", backward}, {"comm_wait", wait}, {"optimizer", 0.001}}},
                        {"comm_bytes", bytes}, {"comm_s", comm_s}};
        out << m.dump() << "\n";
      }
    }
    return d + "/" + name;
  };
  run_shell("mkdir -p " + d + "/local " + d + "/net");
  const std::string local = log("local", 1, 0.004, 0.0005), net = log("net", 2, busy, exposed);
  const auto c = run_shell(kCli + " sim calibrate --cores 2 " + local + " " + net + " -o " + d + "/c.json");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const json p = json::parse(read_all(d + "/c.json"))["params"];
  EXPECT_NEAR(p["intra_bw"].get<double>() / (bytes / 0.004), 1.0, 0.01) << p.dump();
  EXPECT_NEAR(p["inter_bw"].get<double>() / (bytes / busy), 1.0, 0.01) << p.dump();
  EXPECT_NEAR(p["grad_ready_exponent"].get<double>(), 2.0, 1e-3) << p.dump();
  const auto pr = run_shell(kCli + " sim predict --json --tolerance 0.05 --calibration " + d + "/c.json " + net + " 2>&1");
  EXPECT_EQ(pr.exit_code, 0) << "the fitted link-bound run within 5 %: " << pr.output;
  // Nodes that were namespaces of one 2-core machine had a core each: the 2-node run's workers of
  // 2 threads ran at half speed (its compute fit halves), while its collectives waited on the
  // network, not the CPU (the link fitted as before).
  const auto shared = run_shell(kCli + " sim calibrate --cores 2 --shared-machine " + net + " 2>/dev/null");
  const auto alone = run_shell(kCli + " sim calibrate --cores 2 " + net + " 2>/dev/null");
  const json sj = json::parse(shared.output, nullptr, false), aj = json::parse(alone.output, nullptr, false);
  EXPECT_NEAR(sj["params"]["inter_bw"].get<double>() / (bytes / busy), 1.0, 0.01) << shared.output;
  EXPECT_EQ(sj["params"]["cores_per_node"].get<double>(), 1.0) << shared.output;
  EXPECT_TRUE(sj["fit"]["shared_machine"].get<bool>()) << shared.output;
  const double shared_fit = sj["fit"]["serial_s"].get<double>() + sj["fit"]["parallel_s"].get<double>();
  const double alone_fit = aj["fit"]["serial_s"].get<double>() + aj["fit"]["parallel_s"].get<double>();
  EXPECT_NEAR(shared_fit / alone_fit, 0.5, 1e-9) << shared.output << "\n" << alone.output;
  // The same run started with one thread per worker (cohort run --threads-per-proc 1, in its start
  // event; without one, cores / workers: 2): one thread on each node's core did the work two did,
  // so the fit of one thread's compute is the same, and the job's workers run one thread each.
  std::ofstream(net + "/events.jsonl", std::ios::app)
      << json{{"type", "event"}, {"kind", "start"}, {"threads", 1}, {"nproc", 1}, {"nnodes", 2}}.dump() << "\n";
  const json one = json::parse(run_shell(kCli + " sim calibrate --cores 2 --shared-machine " + net + " 2>/dev/null").output, nullptr, false);
  EXPECT_EQ(one["params"].value("threads_per_worker", 0.0), 1.0) << one.dump();
  EXPECT_EQ(one["runs"][0].value("threads", 0), 1) << one.dump();
  EXPECT_EQ(sj["params"].value("threads_per_worker", 0.0), 2.0) << shared.output;
  EXPECT_NEAR((one["fit"]["serial_s"].get<double>() + one["fit"]["parallel_s"].get<double>()) / shared_fit, 1.0, 1e-9) << one.dump();
  // A calibration on the fast link alone keeps the even spread: it cannot see the timing.
  const auto f = run_shell(kCli + " sim calibrate --cores 2 " + local + " 2>/dev/null");
  EXPECT_EQ(json::parse(f.output, nullptr, false)["params"].value("grad_ready_exponent", 0.0), 1.0) << f.output;
  if (!HasFailure()) run_shell("rm -rf " + d);
}

// Across "machines": 2 and 3 nodes as network namespaces on a bridge, every link shaped to 100
// Mbit/s with tc (bench/netns_star.sh, which the benchmarks use too), one rank of one thread per
// node (the namespaces share this machine's cores: --shared-machine). The 2-node run's log gives
// the network (no faster than the shaped link), each run's threads as cohort run logged them, and a
// prediction of the 3-node run it was not fitted on: slower, since each link carries 4/3 of the
// bytes and three nodes share the cores. How close it comes is timing: bench/sim/sim_netns.sh.
TEST(SimCalibrateNetns, TwoNodesOverAShapedLinkPredictThreeNodes) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  if (run_shell("command -v ip").exit_code != 0) GTEST_SKIP() << "needs iproute2 (ip netns); scripts/setup.sh installs it";
  const std::string d = fresh_dir("netns"), id = std::to_string(::getpid());
  const std::string sw = "cohort_ss" + id, node = "cohort_sn" + id + "_";
  struct Cleanup {
    std::string cmd;
    ~Cleanup() { run_shell(cmd); }
  } cleanup{"for n in 0 1 2; do ip netns del " + node + "$n; done 2>/dev/null; ip netns del " + sw + " 2>/dev/null; true"};
  const auto star = run_shell("bash -c '. " COHORT_NETNS_STAR " && netns_star " + sw + " " + node + " csv" + id +
                              "_ 10.79.6 3 100mbit' 2>&1");
  ASSERT_EQ(star.exit_code, 0) << star.output;
  const auto job = [&](int nodes) {
    const std::string dir = d + "/n" + std::to_string(nodes);
    std::string sh = "pids=; ";
    for (int i = 0; i < nodes; ++i) {
      sh += "ip netns exec " + node + std::to_string(i) + " env COHORT_JOB_TOKEN=cohort-tests-sim-netns-token-0123456789 " +
            kCli + " run --nnodes " + std::to_string(nodes) + " --node-rank " + std::to_string(i) +
            " --nproc-per-node 1 --threads-per-proc 1 --no-dashboard --master-addr 10.79.6.1 --master-port " +
            std::to_string(29640 + nodes) + " --rdzv-timeout 60" + (i == 0 ? " --log-dir " + dir : "") + " -- " + kExample +
            " --max-steps 40 --no-eval >" + dir + ".node" + std::to_string(i) + " 2>&1 & pids=\"$pids $!\"; ";
    }
    const auto r = run_shell(sh + "for p in $pids; do wait $p || exit 1; done");
    EXPECT_EQ(r.exit_code, 0) << read_all(dir + ".node0") << read_all(dir + ".node1");
    return dir;
  };
  const std::string two = job(2), three = job(3);
  ASSERT_FALSE(HasFailure());
  const auto c = run_shell(kCli + " sim calibrate --allow-load --shared-machine " + two + " -o " + d + "/c.json 2>&1");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const json cal = json::parse(read_all(d + "/c.json"), nullptr, false);
  const double inter_bw = cal["params"].value("inter_bw", 0.0);
  EXPECT_GT(inter_bw, 0) << cal.dump();
  EXPECT_LE(inter_bw, 1.05 * 100e6 / 8) << "a link shaped to 100 Mbit/s carried more: " << cal.dump();
  EXPECT_EQ(cal["runs"][0].value("nodes", 0), 2) << cal.dump();
  EXPECT_EQ(cal["runs"][0].value("threads", 0), 1) << cal.dump();
  const auto p = run_shell(kCli + " sim predict --json --tolerance 1e9 --calibration " + d + "/c.json " + two + " " + three + " 2>/dev/null");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const json j = json::parse(p.output, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << p.output;
  EXPECT_EQ(j[1].value("nodes", 0), 3) << p.output;
  EXPECT_GT(j[1].value("predicted_step_s", 0.0), j[0].value("predicted_step_s", 0.0)) << p.output;
  for (const auto& r : j) std::cout << "  " << r["nodes"] << " nodes: measured " << r["measured_step_s"] << " s, predicted " << r["predicted_step_s"] << " s\n";
  if (!HasFailure()) run_shell("rm -rf " + d);
}

TEST(SimCalibrateInput, LogsItCannotUseAreNamed) {
  const std::string d = fresh_dir("bad");
  auto make = [&](const std::string& name, const std::string& content) {
    run_shell("mkdir -p " + d + "/" + name);
    std::ofstream(d + "/" + name + "/events.jsonl") << content;
    return d + "/" + name;
  };
  const std::string empty = make("empty", "");
  const std::string torn = make("torn", "{\"type\":\"metrics\",\"rank\":0,\"st");
  // A good log of 2 ranks x 40 steps as cohort run writes it; then without phases (a program
  // without DDP's marks), and cut after a few steps (truncated).
  std::string good, nophases;
  for (int step = 1; step <= 40; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string head = R"({"type":"metrics","rank":)" + std::to_string(rank) + R"(,"world_size":2,"node":0,"step":)" +
                               std::to_string(step) + R"(,"t":)" + std::to_string(1000 + step * 0.03) + R"(,"step_s":0.03,)";
      good += head + R"("phases":{"data":0.001,"forward":0.01,"backward":0.015,"comm_wait":0.001,"optimizer":0.001},"comm_bytes":1000000,"comm_s":0.002})" "\n";
      nophases += head + R"("comm_bytes":1000000,"comm_s":0.002})" "\n";
    }
  }
  const std::string ok = make("good", good);
  make("nophases", nophases);
  make("short", good.substr(0, good.find('\n', good.size() / 8)));
  const auto fine = run_shell(kCli + " sim calibrate " + ok);
  EXPECT_EQ(fine.exit_code, 0) << "the good log calibrates: " << fine.output;
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"calibrate " + d + "/missing", d + "/missing: no event log"},
      {"calibrate " + empty, empty + ": the event log " + empty + "/events.jsonl is empty"},
      {"calibrate " + torn, torn + ": no step metrics"},
      {"calibrate " + d + "/nophases", "carry no phase times"},
      {"calibrate " + d + "/short", "complete steps in"},
      {"calibrate " + d + "/fifo", d + "/fifo: " + d + "/fifo/events.jsonl is not a regular file"},  // would block the open
  };
  run_shell("mkdir -p " + d + "/fifo && mkfifo " + d + "/fifo/events.jsonl");
  for (const auto& c : cases) {
    const auto r = run_shell("timeout -s KILL 20 " + kCli + " sim " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "cohort sim: error: ")) << r.output;
    EXPECT_TRUE(contains(r.output, c.expected)) << c.args << "\n" << r.output;
  }
  // A calibration of another version, or not one at all.
  std::ofstream(d + "/v0.json") << R"({"cohort_sim_calibration": 0, "params": {}, "fit": {}})";
  std::ofstream(d + "/other.json") << R"({"nodes": 2})";
  const auto v = run_shell(kCli + " sim predict --calibration " + d + "/v0.json " + ok);
  EXPECT_TRUE(contains(v.output, "is a calibration of version 0; this cohort reads version 1: calibrate again")) << v.output;
  const auto o = run_shell(kCli + " sim predict --calibration " + d + "/other.json " + ok);
  EXPECT_TRUE(contains(o.output, "is not a calibration (cohort sim calibrate writes one)")) << o.output;
  run_shell("rm -rf " + d);
}

// From one thread count per worker the fit cannot split compute into its serial and parallel
// parts (issue 50: a 2-rank fit alone predicted its models' 1-rank, 2-thread runs 25-59 % short):
// calibrate says so, and predict marks each run at a count the fit never saw. Crafted logs of
// 1 rank (2 threads on --cores 2) and 2 ranks (1 thread each).
TEST(SimCalibrateThreads, OneThreadCountIsNotedAndOtherCountsAreMarked) {
  const std::string d = fresh_dir("threads");
  auto make = [&](const std::string& name, int world, double step_s) {
    std::string log;
    for (int step = 1; step <= 40; ++step) {
      for (int rank = 0; rank < world; ++rank) {
        log += R"({"type":"metrics","rank":)" + std::to_string(rank) + R"(,"world_size":)" + std::to_string(world) +
               R"(,"node":0,"step":)" + std::to_string(step) + R"(,"t":)" + std::to_string(1000 + step * step_s) +
               R"(,"step_s":)" + std::to_string(step_s) + R"(,"phases":{"data":0.001,"forward":)" + std::to_string(step_s * 0.4) +
               R"(,"backward":)" + std::to_string(step_s * 0.5) + R"(,"comm_wait":0.001,"optimizer":0.001},"comm_bytes":)" +
               (world > 1 ? "1000000" : "0") + R"(,"comm_s":0.002})" "\n";
      }
    }
    run_shell("mkdir -p " + d + "/" + name);
    std::ofstream(d + "/" + name + "/events.jsonl") << log;
    return d + "/" + name;
  };
  const std::string one = make("one", 1, 0.03), two = make("two", 2, 0.04);
  const auto fit_two = run_shell(kCli + " sim calibrate --cores 2 " + two + " -o " + d + "/two.json 2>&1");
  ASSERT_EQ(fit_two.exit_code, 0) << fit_two.output;
  EXPECT_TRUE(contains(fit_two.output, "every run gave its workers 1 thread: the fit cannot split their compute")) << fit_two.output;
  const json cal = json::parse(read_all(d + "/two.json"), nullptr, false);
  EXPECT_EQ(cal["fit"]["threads"], json::array({1})) << cal.dump();
  const auto p = run_shell(kCli + " sim predict --json --tolerance 1e9 --calibration " + d + "/two.json " + one + " " + two +
                           " 2>" + d + "/notes");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const json j = json::parse(p.output, nullptr, false);
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << p.output;
  EXPECT_EQ(j[0].value("threads", 0), 2) << p.output;
  EXPECT_FALSE(j[0].value("threads_fitted", true)) << p.output;
  EXPECT_EQ(j[1].value("threads", 0), 1) << p.output;
  EXPECT_TRUE(j[1].value("threads_fitted", false)) << p.output;
  EXPECT_TRUE(contains(read_all(d + "/notes"), one + ": 2 threads per worker, a count the calibration never saw")) << read_all(d + "/notes");
  // Both counts: the split is fitted, nothing is noted or marked.
  const auto fit_both = run_shell(kCli + " sim calibrate --cores 2 " + one + " " + two + " -o " + d + "/both.json 2>&1");
  ASSERT_EQ(fit_both.exit_code, 0) << fit_both.output;
  EXPECT_FALSE(contains(fit_both.output, "cannot split")) << fit_both.output;
  const auto pb = run_shell(kCli + " sim predict --json --tolerance 1e9 --calibration " + d + "/both.json " + one + " " + two + " 2>/dev/null");
  const json jb = json::parse(pb.output, nullptr, false);
  ASSERT_TRUE(jb.is_array() && jb.size() == 2u) << pb.output;
  for (const auto& r : jb) EXPECT_TRUE(r.value("threads_fitted", false)) << pb.output;
  if (!HasFailure()) run_shell("rm -rf " + d);
}
