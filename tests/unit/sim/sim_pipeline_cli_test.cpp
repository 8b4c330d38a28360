// `cohort sim pipeline` (issue 47): the step of a schedule at given costs, from the same lists and
// checker as the executor: the figures the checker gives, the lists as CSV, one line per bad input.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "parallel/pipeline/schedule_check.h"
#include "support/subprocess.h"

using namespace cohort::testing;  // run_shell, contains (support/subprocess.h)
using nlohmann::json;

namespace {
const std::string kPipelineCli = COHORT_CLI;
}  // namespace

TEST(SimPipeline, ReportsTheCheckersFiguresForTheScheduleAndCosts) {
  const auto r = run_shell(kPipelineCli + " sim pipeline --schedule zb-h1 --pp 4 --microbatches 8 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["step"].get<double>(), 3 * 8 + 4 - 1);  // ZB-H1 at unit costs: 3m + p - 1
  EXPECT_NEAR(j["idle_fraction"].get<double>(), 3.0 / 27, 1e-12);
  ASSERT_EQ(j["stages"].size(), 4u);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(j["stages"][s]["peak_stashed"].get<int>(), 4 - s);

  // Other costs: whatever the checker gives for the same lists.
  const auto slow = run_shell(kPipelineCli + " sim pipeline --schedule interleaved-1f1b --pp 2 --virtual-stages 2 "
                                     "--microbatches 4 --forward 1.5 --input-grad 2 --weight-grad 0.5 --json 2>/dev/null");
  ASSERT_EQ(slow.exit_code, 0) << slow.output;
  using namespace cohort::pipeline;
  const ScheduleReport want = check_schedule(make_schedule(ScheduleKind::interleaved_1f1b, 2, 2, 4), Costs{1.5, 2, 0.5, 2.5});
  const json k = json::parse(slow.output, nullptr, false);
  EXPECT_EQ(k["step"].get<double>(), want.makespan);
  EXPECT_EQ(k["ranks"][1]["idle"].get<double>(), want.idle[1]);
}

TEST(SimPipeline, CsvIsTheRanksLists) {
  const auto r = run_shell(kPipelineCli + " sim pipeline --schedule gpipe --pp 2 --microbatches 2 --csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0BW0,0RECV_B1,0BW1\n"
                      "1RECV_F0,1F0,1RECV_F1,1F1,1BW0,1SEND_B0,1BW1,1SEND_B1\n");
}

TEST(SimPipeline, BadInputIsOneLine) {
  const auto unknown = run_shell(kPipelineCli + " sim pipeline --schedule zbv");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.output, "cohort sim pipeline: unknown pipeline schedule 'zbv' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1)\n");
  const auto uneven = run_shell(kPipelineCli + " sim pipeline --schedule interleaved-1f1b --pp 4 --virtual-stages 2 --microbatches 6");
  EXPECT_EQ(uneven.exit_code, 2);
  EXPECT_TRUE(contains(uneven.output, "multiple of the pipeline ranks (4)")) << uneven.output;
  EXPECT_EQ(std::count(uneven.output.begin(), uneven.output.end(), '\n'), 1) << uneven.output;
  const auto huge = run_shell(kPipelineCli + " sim pipeline --pp 1000 --microbatches 100000");
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_TRUE(contains(huge.output, "at most 1,000,000")) << huge.output;
}
