// `cohort sim` as a user runs it: the report of a preset, a change while it runs (--at) giving what
// the engine gives, the optimum next to Young/Daly, and one line per bad input. No torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "presets.h"
#include "published.h"
#include "report.h"
#include "support/subprocess.h"

using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)
using nlohmann::json;

namespace {
const std::string kCli = COHORT_CLI;

json run_json(const std::string& args) {
  const auto r = run_shell(kCli + " sim " + args + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << args;
  return json::parse(r.output, nullptr, false);
}
}  // namespace

TEST(SimCli, RunReportsThePresetAsTheEngineDoes) {
  const json j = run_json("run --preset 64-gpus --set hours=6");
  ASSERT_TRUE(j.is_object());
  cohort::sim::Params p = cohort::sim::find_preset("64-gpus")->params;
  p.hours = 6;
  cohort::sim::Simulation s(p);
  s.run();
  EXPECT_EQ(j["totals"]["steps"].get<long long>(), s.totals().steps);
  EXPECT_DOUBLE_EQ(j["goodput"].get<double>(), s.totals().goodput());
  EXPECT_EQ(j["world"].get<int>(), 64);
  EXPECT_GT(j["scaling_efficiency"].get<double>(), 0.5);
  EXPECT_LE(j["scaling_efficiency"].get<double>(), 1.0);
  EXPECT_EQ(j["series"].size(), 240u);
}

TEST(SimCli, AChangeAtATimeIsTheEnginesSetParamsThen) {
  const json j = run_json("run --preset 64-gpus --set hours=2 --set sample_s=600 --at 3600:inter_bw=1e9");
  cohort::sim::Params p = cohort::sim::find_preset("64-gpus")->params;
  p.hours = 2;
  p.sample_s = 600;
  cohort::sim::Simulation s(p);
  s.run_for(3600);
  auto q = s.params();
  q.inter_bw = 1e9;
  s.set_params(q);
  s.run();
  ASSERT_EQ(j["series"].size(), s.series().size());
  for (size_t i = 0; i < s.series().size(); ++i) EXPECT_DOUBLE_EQ(j["series"][i][1].get<double>(), s.series()[i].samples_per_s);
  EXPECT_DOUBLE_EQ(j["params"]["inter_bw"].get<double>(), 1e9);
}

TEST(SimCli, OptimumStandsNextToYoungDaly) {
  const json j = run_json("optimum --set nodes=16 --set workers_per_node=8 --set node_mtbf_h=100 --set checkpoint_async=false "
                          "--set checkpoint_bw=1e8 --set params=1e8 --set compute_cv=0 --set forward_s=0.1 --set backward_s=0.2");
  EXPECT_NEAR(j["ratio"].get<double>(), 1.0, 0.10) << j.dump();
  EXPECT_GT(j["curve"].size(), 10u);
}

// The published figures as the command prints them: each with its source, the figure and the
// simulator's efficiency from that setup (the same as the library's).
TEST(SimCli, PublishedPrintsEachFigureNextToTheSimulators) {
  const json j = run_json("published --json");
  const auto& figures = cohort::sim::published_figures();
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), figures.size());
  for (size_t i = 0; i < figures.size(); ++i) {
    EXPECT_EQ(j[i]["model"].get<std::string>(), figures[i].model);
    EXPECT_EQ(j[i]["gpus"].get<int>(), figures[i].nodes * figures[i].gpus_per_node);
    EXPECT_TRUE(contains(j[i]["source"].get<std::string>(), "arXiv:1802.05799") ||
                contains(j[i]["source"].get<std::string>(), "benchmarks/distributed/ddp/README.md"))
        << j[i].dump();
    EXPECT_DOUBLE_EQ(j[i]["published_efficiency"].get<double>(), figures[i].efficiency);
    EXPECT_DOUBLE_EQ(j[i]["simulated_efficiency"].get<double>(), cohort::sim::simulated_efficiency(figures[i].params));
  }
  const auto text = run_shell(kCli + " sim published");
  EXPECT_TRUE(contains(text.output, "VGG-16         512 GPUs (128 x 4): published  68.0 %")) << text.output;
  EXPECT_TRUE(contains(text.output, "ResNet-50       16 GPUs (  2 x 8): published  96.2 %")) << text.output;
}

TEST(SimCli, BadInputIsOneClearLinePerProblem) {
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"run --set nodes=0", "cohort sim: error: --set nodes = '0': out of range [1, 100000]"},
      {"run --set inter_bw=-1", "cohort sim: error: --set inter_bw = '-1': out of range"},
      {"run --set bogus=1", "unknown parameter 'bogus'"},
      {"run --preset nope", "no preset 'nope' (there are: this-machine, 64-gpus, llama3-4096)"},
      {"run --params /nonexistent.json", "cohort sim: error: --params /nonexistent.json: No such file or directory"},
      {"run --at 10:nodes", "--at 10:nodes: give SECONDS:KEY=VALUE"},
      {"optimum", "needs failures: set node_mtbf_h"},
  };
  for (const auto& c : cases) {
    const auto r = run_shell(kCli + " sim " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.expected)) << c.args << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "terminate called")) << r.output;
  }
  // Two bad values: both named.
  const auto r = run_shell(kCli + " sim run --set nodes=0 --set detect_s=-3");
  EXPECT_TRUE(contains(r.output, "nodes = '0'") && contains(r.output, "detect_s = '-3'")) << r.output;
}

// A FIFO hung the command in open(); /dev/zero grew until std::bad_alloc. Each is one line now,
// and the command ends by itself (`timeout` kills it otherwise: exit 137, and the test fails).
TEST(SimCli, AParameterFileThatIsNoRegularFileIsOneLine) {
  const std::string dir = ::testing::TempDir() + "/cohort_sim_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(run_shell("mkdir -p " + dir + " && mkfifo " + dir + "/params.json").exit_code, 0);
  const std::pair<std::string, std::string> cases[] = {
      {"run --params " + dir + "/params.json", "--params " + dir + "/params.json: not a regular file (a FIFO)"},
      {"run --params /dev/zero", "--params /dev/zero: not a regular file (a character device)"},
      {"predict --calibration /dev/zero " + dir, "--calibration /dev/zero: not a regular file (a character device)"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run_shell("timeout -s KILL 20 " + kCli + " sim " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output, "cohort sim: error: " + expected + "\n") << args;
  }
  run_shell("rm -rf " + dir);
}

// 100,000 nested arrays (200 KB) as a parameter's value overflowed the stack (SIGSEGV, issue 50);
// as a calibration too. One line naming the file now.
TEST(SimCli, JsonNestedTooDeepIsOneLine) {
  const std::string file = "/tmp/cohort_sim_deep_" + std::to_string(::getpid()) + ".json";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(file) << "{\"cohort_sim_calibration\": " << deep << ", \"nodes\": " << deep << "}";
  for (const std::string args : {"run --params " + file, "predict --calibration " + file + " /tmp"}) {
    const auto r = run_shell(kCli + " sim " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_EQ(r.output, "cohort sim: error: " + file + " is nested deeper than 64 levels\n") << args;
  }
  std::remove(file.c_str());
}

TEST(SimCli, ParamsListsEveryParameterWithItsUnit) {
  const auto r = run_shell(kCli + " sim params");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& s : cohort::sim::param_specs()) EXPECT_TRUE(contains(r.output, s.name)) << s.name;
  const json schema = run_json("params --json");
  EXPECT_EQ(schema.size(), cohort::sim::param_specs().size());
}
