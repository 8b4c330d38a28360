// The simulator's memory budget (issue 50, src/sim/engine/budget.h): parameters in range that ask
// for terabytes of series or timeline finish within the budget under an address-space limit, and
// say what they down-sampled in one line; a timeline that cannot fit is refused; the estimate is
// within a factor of the real use; down-sampling changes the outputs, not the simulation. No torch.
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/subprocess.h"

using namespace cohort::testing;
using namespace cohort::sim;
using nlohmann::json;

namespace {

const std::string kBudgetCli = COHORT_CLI;
constexpr rlim_t kAddressSpace = 4000000000;  // as `prlimit --as=4000000000`: the old code died under it
constexpr double kBudgetMiB = 256;            // memory_budget_mb's default

struct Limited {
  int exit_code = -1;  // 128 + the signal when killed by one
  double peak_mib = 0;  // the child's peak RSS (wait4's ru_maxrss)
  std::string out, err;
};

std::string budget_slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `cohort sim ARGS` as a child under an address-space limit; its peak RSS from wait4. A forked
// child starts with this process's resident pages counted, so this process is kept small first
// (and the baseline, measured the same way, is taken before anything large was read here).
Limited run_limited(const std::vector<std::string>& args) {
  malloc_trim(0);
  const std::string stem = ::testing::TempDir() + "/sim_budget_" + std::to_string(getpid());
  const std::string out_path = stem + ".out", err_path = stem + ".err";
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit lim{kAddressSpace, kAddressSpace};
    setrlimit(RLIMIT_AS, &lim);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<std::string> all = {kBudgetCli, "sim"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(kBudgetCli.c_str(), argv.data());
    _exit(127);
  }
  Limited r;
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) != pid) return r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  r.out = budget_slurp(out_path);
  r.err = budget_slurp(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  return r;
}

// The peak of the same binary on a run whose outputs are nothing to speak of.
double baseline_mib() {
  static const double base = run_limited({"run", "--set", "hours=0.001", "--set", "timeline_workers=0"}).peak_mib;
  return base;
}

std::vector<std::string> budget_sets(const std::vector<std::string>& kv) {
  std::vector<std::string> args = {"run"};
  for (const auto& s : kv) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

}  // namespace

// The first case: 4,096 workers on the timeline over a 1e6 s window (it took 14 GB, then
// SIGABRT). Now the window is what 256 MiB holds, said on stderr and in the report.
TEST(SimBudget, AllWorkersOverAMillionSecondWindowKeepTheLastStepsThatFit) {
  const double base = baseline_mib();
  auto args = budget_sets({"nodes=512", "workers_per_node=8", "timeline_workers=4096", "timeline_s=1e6"});
  args.push_back("--timeline");
  const Limited r = run_limited(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out.substr(0, 200);
  const std::string notice = j.value("notice", "");
  EXPECT_TRUE(contains(notice, "memory budget 256 MiB (memory_budget_mb): the timeline of 4096 workers over timeline_s = 1e+06 s"))
      << notice;
  EXPECT_TRUE(contains(notice, "it keeps the last")) << notice;
  EXPECT_EQ(lines(r.err), std::vector<std::string>{"cohort sim: " + notice});
  ASSERT_EQ(j["timeline"].size(), 4096u);
  const double window = j["memory"]["timeline_s"].get<double>();
  EXPECT_LT(window, 1e6);
  const double from = j["t"].get<double>() - window - 10 * j["step"]["step_s"].get<double>();
  for (const auto& seg : j["timeline"][0]) EXPECT_GE(seg[0].get<double>(), from) << seg;
  EXPECT_LE(j["memory"]["planned_bytes"].get<double>(), kBudgetMiB * 1048576);
  EXPECT_LT(r.peak_mib - base, kBudgetMiB * 1.25) << "peak " << r.peak_mib << " MiB, baseline " << base;
}

// The second case: a point every microsecond for 1e5 hours (3.6e14 points). The series is
// sampled coarser to fit. (Identical steps and no timeline, so that 1e5 hours take a second.)
TEST(SimBudget, AMicrosecondSeriesOverAHundredThousandHoursIsSampledCoarser) {
  const double base = baseline_mib();
  const Limited r = run_limited(budget_sets({"sample_s=1e-6", "hours=1e5", "compute_cv=0", "timeline_workers=0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out.substr(0, 200);
  const std::string notice = j.value("notice", "");
  EXPECT_TRUE(contains(notice, "the series at sample_s = 1e-06 s would hold 3.6e+14 points")) << notice;
  EXPECT_EQ(lines(r.err), std::vector<std::string>{"cohort sim: " + notice});
  const double every = j["memory"]["sample_s"].get<double>();
  EXPECT_TRUE(contains(notice, "sampled every ")) << notice;
  const auto& series = j["series"];
  ASSERT_GT(series.size(), 1000u);
  EXPECT_LE(series.size() * kSeriesPointBytes, kBudgetMiB * 1048576);
  EXPECT_NEAR(series[1][0].get<double>() - series[0][0].get<double>(), every, 1e-6 * every);
  EXPECT_NEAR(j["totals"]["wall_s"].get<double>(), 1e5 * 3600, 1);
  EXPECT_LT(r.peak_mib - base, kBudgetMiB * 1.25) << "peak " << r.peak_mib << " MiB, baseline " << base;
}

// Where even one step of the timeline's workers does not fit, the run is refused in one line that
// names the parameter and the limit.
TEST(SimBudget, ATimelineWhoseStepDoesNotFitIsRefused) {
  const Limited r = run_limited(budget_sets({"nodes=512", "workers_per_node=8", "timeline_workers=4096", "memory_budget_mb=4"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "cohort sim: error: timeline_workers = 4096: one step of their timeline takes ~")) << r.err;
  EXPECT_TRUE(contains(r.err, "(memory_budget_mb = 4): lower timeline_workers or raise memory_budget_mb")) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// A normal run within a budget: the estimate made before simulating is within a factor of two of
// what the process took beyond its baseline (series, timeline, the report's JSON and text).
TEST(SimBudget, TheEstimateIsWithinAFactorOfTheRealUse) {
  const double base = baseline_mib();
  auto args = budget_sets({"nodes=64", "workers_per_node=8", "timeline_workers=512", "timeline_s=60", "hours=0.05", "sample_s=0.002",
                    "memory_budget_mb=1024"});
  args.push_back("--timeline");
  const Limited r = run_limited(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_FALSE(j.contains("notice")) << j["notice"];
  EXPECT_TRUE(r.err.empty()) << r.err;
  const double estimate = j["memory"]["asked_bytes"].get<double>() / 1048576;
  const double used = r.peak_mib - base;
  EXPECT_GT(estimate, 100) << "a case big enough to measure";
  EXPECT_GT(used, estimate / 2) << "estimate " << estimate << " MiB";
  EXPECT_LT(used, estimate * 2) << "estimate " << estimate << " MiB";
  std::printf("  estimate %.0f MiB, used %.0f MiB beyond the baseline (%.0f MiB)\n", estimate, used, base);
}

// A coarser series and a shorter timeline are outputs: the simulated job is the same.
TEST(SimBudget, DownSamplingChangesTheOutputsNotTheSimulation) {
  Params p;
  p.nodes = 8;
  p.workers_per_node = 4;
  p.compute_cv = 0.05;
  p.checkpoint_every = 500;
  p.node_mtbf_h = 10;  // a failure every 1.25 h of the job
  p.hours = 5;
  p.sample_s = 0.125;  // 144,000 points: 55 MiB
  Params small = p;
  small.memory_budget_mb = 16;
  Simulation full(p), coarse(small);
  EXPECT_TRUE(full.memory_plan().notice.empty()) << full.memory_plan().notice;
  EXPECT_TRUE(contains(coarse.memory_plan().notice, "memory budget 16 MiB (memory_budget_mb): the series at sample_s = 0.125 s"))
      << coarse.memory_plan().notice;
  full.run();
  coarse.run();
  EXPECT_EQ(full.series().size(), 144000u);
  EXPECT_LT(coarse.series().size() * kSeriesPointBytes, 16 * 1048576.0);
  EXPECT_EQ(coarse.totals().steps, full.totals().steps);
  EXPECT_EQ(coarse.totals().checkpoints, full.totals().checkpoints);
  EXPECT_NEAR(coarse.totals().useful_s, full.totals().useful_s, 1e-9 * full.totals().useful_s);
  EXPECT_EQ(coarse.totals().failures, full.totals().failures);
  EXPECT_GT(full.totals().failures, 0);
  EXPECT_NEAR(coarse.totals().goodput(), full.totals().goodput(), 1e-12);
}

// Live changes go through the same plan: past the budget from then on, or refused with nothing
// changed (the page's controls, `cohort sim run --at`).
TEST(SimBudget, AChangeWhileRunningIsPlannedOrRefusedWithNothingChanged) {
  Params p;
  p.nodes = 128;
  p.workers_per_node = 8;
  p.hours = 0.5;
  Simulation s(p);
  s.run_for(300);
  EXPECT_TRUE(s.memory_plan().notice.empty()) << s.memory_plan().notice;
  Params wide = p;
  wide.timeline_workers = 1024;
  wide.timeline_s = 1e4;
  s.set_params(wide);
  EXPECT_TRUE(contains(s.memory_plan().notice, "the timeline of 1024 workers over timeline_s = 1e+04 s")) << s.memory_plan().notice;
  EXPECT_LT(s.memory_plan().timeline_s, 1e4);
  s.run_for(300);
  EXPECT_EQ(s.timeline().size(), 1024u);
  const double steps = s.memory_plan().timeline_steps;
  Params tiny = wide;
  tiny.memory_budget_mb = 1;
  EXPECT_THROW(s.set_params(tiny), std::invalid_argument);
  EXPECT_EQ(s.params().memory_budget_mb, 256);
  EXPECT_EQ(s.memory_plan().timeline_steps, steps);
  s.run();
  EXPECT_TRUE(s.finished());
}
