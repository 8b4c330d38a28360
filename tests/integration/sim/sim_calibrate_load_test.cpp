// `cohort sim calibrate` and load it does not model (issue 50): steps during which other work
// loaded the machine are left out of the fit, a run with too few clean steps is refused (unless
// --allow-load), and the first bucket's bytes come from the run's DDP. The logs are cohort run's:
// crafted ones for exact figures, and a real run beside two busy processes. How well calibrations
// predict on a quiet machine is a benchmark's (bench/sim/sim_models.sh). No torch in this file.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "support/subprocess.h"

using namespace cohort::testing;  // run_shell, contains (support/subprocess.h)
using nlohmann::json;

namespace {

const std::string kLoadCli = COHORT_CLI;
const std::string kLoadExample = COHORT_FASHION_MNIST;

std::string load_dir(const std::string& tag) {
  const std::string d = "/tmp/cohort-sim-load-" + tag + "-" + std::to_string(::getpid());
  run_shell("rm -rf " + d + " && mkdir -p " + d);
  return d;
}

// A 2-rank log of 100 steps on a 2-core machine, each rank a full core busy: a step takes 0.1 s
// and 0.1 s of CPU. Steps [loaded_from, loaded_to) ran beside a busy process: 0.2 s each for the
// same CPU, and the machine samples of those windows show 1 core that was not the job's.
std::string crafted_log(const std::string& dir, int loaded_from, int loaded_to) {
  run_shell("mkdir -p " + dir);
  std::ofstream out(dir + "/events.jsonl");
  out << json{{"type", "event"}, {"kind", "ddp_buckets"}, {"rank", 0}, {"t", 1000.0}, {"buckets", 2},
              {"first_bytes", 3000000}, {"total_bytes", 4000000}}.dump() << "\n";
  double t = 1000, next_sample = 1000;
  out << json{{"type", "machine"}, {"t", t}, {"cores", 2}, {"busy_cores", 2.0}, {"steal_cores", 0.0}}.dump() << "\n";
  for (int step = 1; step <= 100; ++step) {
    const bool loaded = step >= loaded_from && step < loaded_to;
    const double step_s = loaded ? 0.2 : 0.1;
    t += step_s;
    for (int rank = 0; rank < 2; ++rank) {
      out << json{{"type", "metrics"}, {"rank", rank}, {"world_size", 2}, {"node", 0}, {"step", step}, {"t", t},
                  {"step_s", step_s}, {"cpu_s", 0.1},
                  {"phases", {{"data", 0.001}, {"forward", step_s * 0.4}, {"backward", step_s * 0.5}, {"comm_wait", 0.001},
                              {"optimizer", step_s * 0.1 - 0.002}}},
                  {"comm_bytes", 4000000}, {"comm_s", 0.01}}.dump() << "\n";
    }
    if (t >= next_sample + 1) {  // a sample a second: busy cores 2, the job's 2 or (loaded) 1
      next_sample = t;
      out << json{{"type", "machine"}, {"t", t}, {"cores", 2}, {"busy_cores", 2.0}, {"steal_cores", loaded ? 0.1 : 0.0}}.dump()
          << "\n";
    }
  }
  return dir;
}

json calibration(const Run& r) { return json::parse(r.output.substr(r.output.find('{')), nullptr, false); }

}  // namespace

TEST(SimCalibrateLoad, StepsOfLoadedWindowsAreLeftOutAndTheFirstBucketIsTheLogs) {
  const std::string d = load_dir("crafted");
  // 45 of 100 steps loaded (and, with them, the quiet steps that share their windows): over all
  // the measured steps the median step would be the loaded 0.2 s.
  const std::string part = crafted_log(d + "/part", 30, 75);
  const auto c = run_shell(kLoadCli + " sim calibrate --cores 2 " + part + " 2>" + d + "/err");
  ASSERT_EQ(c.exit_code, 0) << c.output << run_shell("cat " + d + "/err").output;
  const std::string err = run_shell("cat " + d + "/err").output;
  EXPECT_TRUE(contains(err, "measured steps ran while other work loaded the machine")) << err;
  EXPECT_TRUE(contains(err, "fitted on the other")) << err;
  const json run = calibration(c)["runs"][0];
  EXPECT_DOUBLE_EQ(run.value("step_s", 0.0), 0.1) << run.dump();
  EXPECT_GT(run["load"].value("loaded_steps", 0), 30) << run.dump();
  EXPECT_TRUE(run["load"].value("measured", false)) << run.dump();
  EXPECT_GT(run["load"].value("foreign_cores", 0.0), 0.2) << run.dump();
  EXPECT_EQ(run.value("first_bucket_bytes", 0.0), 3e6) << run.dump();
  // A quiet log: nothing left out, no note.
  const std::string quiet = crafted_log(d + "/quiet", 0, 0);
  const auto q = run_shell(kLoadCli + " sim calibrate --cores 2 " + quiet + " 2>" + d + "/qerr");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_EQ(calibration(q)["runs"][0]["load"].value("loaded_steps", -1), 0) << q.output;
  EXPECT_FALSE(contains(run_shell("cat " + d + "/qerr").output, "other work")) << run_shell("cat " + d + "/qerr").output;
  if (!HasFailure()) run_shell("rm -rf " + d);
}

TEST(SimCalibrateLoad, ARunLoadedThroughoutIsRefusedUnlessAllowed) {
  const std::string d = load_dir("refused");
  const std::string all = crafted_log(d + "/all", 1, 101);
  const auto r = run_shell(kLoadCli + " sim calibrate --cores 2 " + all + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "cohort sim: error: " + all + ": ")) << r.output;
  EXPECT_TRUE(contains(r.output, "ran while other work loaded the machine")) << r.output;
  EXPECT_TRUE(contains(r.output, "Run it again on a quiet machine, or pass --allow-load")) << r.output;
  const auto a = run_shell(kLoadCli + " sim calibrate --allow-load --cores 2 " + all + " 2>" + d + "/err");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_DOUBLE_EQ(calibration(a)["runs"][0].value("step_s", 0.0), 0.2) << a.output;
  EXPECT_TRUE(contains(run_shell("cat " + d + "/err").output, "kept (--allow-load)")) << run_shell("cat " + d + "/err").output;
  if (!HasFailure()) run_shell("rm -rf " + d);
}

// A real 2-rank run while two busy processes take the machine's cores: its log has the machine's
// samples and each step's CPU, and calibrate sees most of its steps loaded by about a core of other
// work (the windows at the run's edges hold start-up and are not judged, so a short run may keep
// a few). More load from the suite's other test only adds to it.
TEST(SimCalibrateLoad, ARealRunBesideBusyProcessesIsSeenLoaded) {
  const std::string d = load_dir("real");
  const auto busy = run_shell("for i in 1 2; do (timeout 300 sh -c 'while :; do :; done' >/dev/null 2>&1 &) ; done; echo started");
  ASSERT_EQ(busy.exit_code, 0);
  const auto r = run_shell(kLoadCli + " run --nproc-per-node 2 --no-dashboard --log-dir " + d + "/run -- " + kLoadExample +
                           " --max-steps 100 --no-eval 2>&1");
  run_shell("pkill -f \"^sh -c while :; do :; done\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream log(d + "/run/events.jsonl");
  int machine = 0, with_cpu = 0;
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    machine += j.value("type", "") == "machine";
    with_cpu += j.value("type", "") == "metrics" && j.contains("cpu_s") && j["cpu_s"].is_number();
  }
  EXPECT_GE(machine, 2) << "a sample a second";
  EXPECT_GE(with_cpu, 200) << "every step's record has its CPU time";
  const auto c = run_shell(kLoadCli + " sim calibrate --allow-load " + d + "/run 2>" + d + "/err");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::string err = run_shell("cat " + d + "/err").output;
  EXPECT_TRUE(contains(err, "ran while other work loaded the machine")) << err;
  const json run = calibration(c)["runs"][0];
  EXPECT_GT(run["load"].value("foreign_cores", 0.0), 0.5) << run.dump();
  EXPECT_GE(run["load"].value("loaded_steps", 0) * 2, run.value("steps", 0) * 4 / 5) << "most measured steps: " << run.dump();
  if (!HasFailure()) run_shell("rm -rf " + d);
}

// A run directory's name need not be UTF-8 (a Latin-1 file system): the calibration and predict's
// --json name it with U+FFFD (issue 50); dumping the name threw type_error.316 before.
TEST(SimCalibrateLoad, ARunDirectoryNamedInLatin1IsWrittenReplaced) {
  const std::string d = load_dir("latin1");
  const std::string run = crafted_log(d + "/caf\xe9", 0, 0);
  const auto c = run_shell(kLoadCli + " sim calibrate --cores 2 -o " + d + "/cal.json " + run);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  std::ifstream in(d + "/cal.json");
  const json cal = json::parse(in, nullptr, false);
  ASSERT_TRUE(cal.is_object());
  EXPECT_EQ(cal["runs"][0]["dir"], d + "/caf\xEF\xBF\xBD");
  const auto p = run_shell(kLoadCli + " sim predict --json --calibration " + d + "/cal.json " + run + " 2>/dev/null");
  const json predicted = json::parse(p.output, nullptr, false);
  ASSERT_TRUE(predicted.is_array()) << p.output;
  EXPECT_EQ(predicted[0]["dir"], d + "/caf\xEF\xBF\xBD");
  if (!HasFailure()) run_shell("rm -rf " + d);
}
