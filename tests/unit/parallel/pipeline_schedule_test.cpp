// Pipeline schedules as data (issue 47): every schedule for p in {2,3,4}, v in {1,2}, m in 1..16
// runs through check_schedule() without deadlock, with every dependency kept (checked here again
// from the start times, apart from the checker's own bookkeeping), with the bubble of its paper's
// formula at unit costs and the stashes 1F1B is known for; broken lists are caught and named.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "cohort/error.h"
#include "parallel/pipeline/schedule_check.h"

namespace cohort::pipeline {
namespace {

const ScheduleKind kAll[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b,
                             ScheduleKind::zb_h1};

std::string label(const Schedule& s) {
  return std::string(schedule_name(s.kind)) + " p=" + std::to_string(s.ranks) + " v=" + std::to_string(s.stages_per_rank) +
         " m=" + std::to_string(s.microbatches);
}

// The step at unit costs (F = B = W = 1, BW = 2), in units.
//  GPipe, 1F1B, interleaved (chunks of 1/v of the layers; costs per chunk): 3(vm + p - 1), so the
//  bubble is (p-1)/(vm+p-1) of the step — Megatron-LM's (p-1)/(vm) of the ideal step 3vm.
//  ZB-H1, m >= p: 3m + p - 1 (the paper's bubble (p-1)(T_F + T_B - T_W) = p-1 units, a third of
//  1F1B's 3(p-1)). m < p: 2(m + p) - 1 (the pipe never fills; measured, see docs/parallel/pipeline.md).
double expected_makespan(const Schedule& s) {
  const int p = s.ranks, v = s.stages_per_rank, m = s.microbatches;
  if (s.kind == ScheduleKind::zb_h1) return m >= p ? 3 * m + p - 1 : 2 * (m + p) - 1;
  return 3 * (v * m + p - 1);
}

// Whether make_schedule may refuse these numbers (and must).
bool refused(ScheduleKind k, int p, int v, int m) {
  if (v > 1 && k != ScheduleKind::interleaved_1f1b) return true;
  return k == ScheduleKind::interleaved_1f1b && v > 1 && m % p != 0;
}

// Every dependency, from the start times the checker reports (not from its own bookkeeping).
void expect_dependencies_in_time(const Schedule& s, const ScheduleReport& r, const Costs& c) {
  std::map<std::tuple<int, int, int>, double> start, end;
  for (int rank = 0; rank < s.ranks; ++rank)
    for (size_t i = 0; i < s.actions[rank].size(); ++i) {
      const Action& a = s.actions[rank][i];
      if (!is_compute(a.kind)) continue;
      const double cost = a.kind == ActionKind::forward ? c.forward
                          : a.kind == ActionKind::full_backward ? c.full_backward
                          : a.kind == ActionKind::input_grad ? c.input_grad : c.weight_grad;
      // B and BW both count as "the backward" of (stage, microbatch) for their neighbours.
      const int kind = a.kind == ActionKind::full_backward ? static_cast<int>(ActionKind::input_grad) : static_cast<int>(a.kind);
      start[{kind, a.stage, a.microbatch}] = r.start[rank][i];
      end[{kind, a.stage, a.microbatch}] = r.start[rank][i] + cost;
    }
  const int F = static_cast<int>(ActionKind::forward), B = static_cast<int>(ActionKind::input_grad),
            W = static_cast<int>(ActionKind::weight_grad);
  auto begins = [&](int kind, int st, int i) { return start.at(std::make_tuple(kind, st, i)); };
  auto ends = [&](int kind, int st, int i) { return end.at(std::make_tuple(kind, st, i)); };
  for (int st = 0; st < s.stages(); ++st)
    for (int i = 0; i < s.microbatches; ++i) {
      const std::string where = label(s) + " stage " + std::to_string(st) + " microbatch " + std::to_string(i);
      ASSERT_TRUE(start.count(std::make_tuple(F, st, i)) && start.count(std::make_tuple(B, st, i))) << where;
      if (st > 0) {
        EXPECT_GE(begins(F, st, i), ends(F, st - 1, i)) << where;
      }
      EXPECT_GE(begins(B, st, i), ends(F, st, i)) << where;
      if (st + 1 < s.stages()) {
        EXPECT_GE(begins(B, st, i), ends(B, st + 1, i)) << where;
      }
      if (start.count(std::make_tuple(W, st, i))) {
        EXPECT_GE(begins(W, st, i), ends(B, st, i)) << where;
      }
    }
}

TEST(PipelineSchedule, EveryScheduleRunsWithItsPapersBubbleAndStashes) {
  int checked = 0;
  for (ScheduleKind k : kAll)
    for (int p = 2; p <= 4; ++p)
      for (int v = 1; v <= 2; ++v)
        for (int m = 1; m <= 16; ++m) {
          if (refused(k, p, v, m)) {
            EXPECT_THROW(make_schedule(k, p, v, m), ConfigError) << schedule_name(k) << " p=" << p << " v=" << v << " m=" << m;
            continue;
          }
          const Schedule s = make_schedule(k, p, v, m);
          const ScheduleReport r = check_schedule(s);
          ASSERT_TRUE(r.ok()) << label(s) << ": " << r.message;
          expect_dependencies_in_time(s, r, Costs{});
          ++checked;
          const double makespan = expected_makespan(s);
          EXPECT_EQ(r.makespan, makespan) << label(s);
          for (int rank = 0; rank < p; ++rank) EXPECT_EQ(r.busy[rank], 3.0 * v * m) << label(s) << " rank " << rank;
          EXPECT_NEAR(r.idle_fraction(), 1.0 - 3.0 * v * m / makespan, 1e-12) << label(s);
          if (k != ScheduleKind::zb_h1) {
            EXPECT_NEAR(r.idle_fraction(), double(p - 1) / (v * m + p - 1), 1e-12) << label(s);
          }
          if (k == ScheduleKind::zb_h1 && m >= p) {
            EXPECT_NEAR(r.idle_fraction(), double(p - 1) / (3 * m + p - 1), 1e-12) << label(s);
          }
          for (int st = 0; st < s.stages(); ++st) {
            const bool one_f_one_b = k == ScheduleKind::one_f_one_b || k == ScheduleKind::zb_h1 ||
                                     (k == ScheduleKind::interleaved_1f1b && v == 1);
            if (one_f_one_b) {
              EXPECT_EQ(r.peak_stashed[st], std::min(m, p - st)) << label(s) << " stage " << st;
            }
            if (k == ScheduleKind::gpipe) {
              EXPECT_EQ(r.peak_stashed[st], m) << label(s) << " stage " << st;
            }
            // ZB-H1 defers the W's of rank r's first r steady steps: what W needs stays a while longer.
            if (k == ScheduleKind::zb_h1) {
              EXPECT_EQ(r.peak_held[st], std::min(m, p)) << label(s) << " stage " << st;
            }
            if (k != ScheduleKind::zb_h1) {
              EXPECT_EQ(r.peak_held[st], r.peak_stashed[st]) << label(s) << " stage " << st;
            }
          }
        }
  // 4 kinds × 3 p × 16 m at v = 1, and interleaved at v = 2 for m a multiple of p (8 + 5 + 4).
  EXPECT_EQ(checked, 4 * 3 * 16 + 17);
}

TEST(PipelineSchedule, ZeroBubbleH1HasAThirdOfOneFOneBsBubble) {
  for (int p = 2; p <= 4; ++p)
    for (int m = p; m <= 16; ++m) {
      const ScheduleReport zb = check_schedule(make_schedule(ScheduleKind::zb_h1, p, 1, m));
      const ScheduleReport ofob = check_schedule(make_schedule(ScheduleKind::one_f_one_b, p, 1, m));
      ASSERT_TRUE(zb.ok() && ofob.ok());
      // The same work (3m per rank): the idle time per rank is p-1 against 3(p-1).
      EXPECT_EQ(zb.makespan - 3 * m, (ofob.makespan - 3 * m) / 3) << "p=" << p << " m=" << m;
    }
}

TEST(PipelineSchedule, UnequalCostsStillKeepEveryDependency) {
  const Costs costs{1.0, 1.5, 0.5, 2.0};
  for (ScheduleKind k : kAll)
    for (int p = 2; p <= 4; ++p) {
      const int v = k == ScheduleKind::interleaved_1f1b ? 2 : 1;
      const Schedule s = make_schedule(k, p, v, 2 * p);
      const ScheduleReport r = check_schedule(s, costs);
      ASSERT_TRUE(r.ok()) << label(s) << ": " << r.message;
      expect_dependencies_in_time(s, r, costs);
    }
}

// Finds `text` (e.g. "0SEND_F1") in rank `rank`'s list.
size_t find(const Schedule& s, int rank, const std::string& text) {
  for (size_t i = 0; i < s.actions[rank].size(); ++i)
    if (to_string(s.actions[rank][i]) == text) return i;
  ADD_FAILURE() << text << " not on rank " << rank << ": " << to_csv(s);
  return 0;
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(PipelineSchedule, ADroppedSendIsADeadlockOrAMismatchNamingRankStageAndMicrobatch) {
  // The last activation never sent: rank 1 waits for it, rank 0 for the gradient rank 1 never makes.
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  s.actions[0].erase(s.actions[0].begin() + find(s, 0, "0SEND_F3"));
  const ScheduleReport r = check_schedule(s);
  EXPECT_EQ(r.problem, Problem::deadlock) << r.message;
  expect_contains(r.message, {"rank 0 waits", "output gradient of stage 0, microbatch 3",
                              "rank 1 waits", "activation of stage 1, microbatch 3 from rank 0, which is waiting itself"});
  // One in the middle: the next send on the link (microbatch 3) meets the receive of microbatch 2.
  Schedule middle = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  middle.actions[0].erase(middle.actions[0].begin() + find(middle, 0, "0SEND_F2"));
  const ScheduleReport r2 = check_schedule(middle);
  EXPECT_EQ(r2.problem, Problem::dependency) << r2.message;
  expect_contains(r2.message, {"rank 1 runs the receive of the activation of stage 1, microbatch 2",
                               "rank 0 sends on that link is the send of the activation of stage 0, microbatch 3"});
}

TEST(PipelineSchedule, AReceiveMovedBeforeItsSendIsADeadlockCycle) {
  // Rank 0 waits for microbatch 0's gradient before sending microbatch 0's activation.
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  std::swap(s.actions[0][find(s, 0, "0SEND_F0")], s.actions[0][find(s, 0, "0RECV_B0")]);
  const ScheduleReport r = check_schedule(s);
  EXPECT_EQ(r.problem, Problem::deadlock) << r.message;
  expect_contains(r.message, {"rank 0 waits at action 1 for the receive of the output gradient of stage 0, microbatch 0",
                              "rank 1 waits at action 0 for the receive of the activation of stage 1, microbatch 0"});
}

TEST(PipelineSchedule, AComputeBeforeItsReceiveIsADependencyViolation) {
  Schedule s = make_schedule(ScheduleKind::zb_h1, 3, 1, 4);
  std::swap(s.actions[2][find(s, 2, "2RECV_F1")], s.actions[2][find(s, 2, "2F1")]);
  const ScheduleReport r = check_schedule(s);
  EXPECT_EQ(r.problem, Problem::dependency) << r.message;
  expect_contains(r.message, {"rank 2 runs the forward of stage 2, microbatch 1", "before receiving its input from rank 1"});
}

TEST(PipelineSchedule, SendsSwappedOnALinkAreCaughtAtTheReceive) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 3);
  std::swap(s.actions[0][find(s, 0, "0SEND_F0")], s.actions[0][find(s, 0, "0SEND_F1")]);
  const ScheduleReport r = check_schedule(s);
  EXPECT_EQ(r.problem, Problem::dependency) << r.message;
  // Swapped, the send of microbatch 1 comes before microbatch 1's forward; after the forwards, the
  // receive meets the wrong tensor first: either way the message names the rank and microbatch.
  expect_contains(r.message, {"rank 0 runs the send of the activation of stage 0, microbatch 1", "before the forward"});

  Schedule late = make_schedule(ScheduleKind::gpipe, 2, 1, 3);
  auto& list = late.actions[0];
  const Action first = list[find(late, 0, "0SEND_F0")];
  list.erase(list.begin() + find(late, 0, "0SEND_F0"));
  list.insert(list.begin() + find(late, 0, "0SEND_F1") + 1, first);
  const ScheduleReport r2 = check_schedule(late);
  EXPECT_EQ(r2.problem, Problem::dependency) << r2.message;
  expect_contains(r2.message, {"rank 1 runs the receive of the activation of stage 1, microbatch 0",
                               "the next tensor rank 0 sends on that link is the send of the activation of stage 0, microbatch 1"});
}

TEST(PipelineSchedule, BackwardsInTheWrongOrderAndMissingWorkAreNamed) {
  Schedule s = make_schedule(ScheduleKind::interleaved_1f1b, 2, 2, 2);  // rank 0 holds stages 0 and 2
  Schedule w = make_schedule(ScheduleKind::zb_h1, 2, 1, 4);
  w.actions[1].erase(w.actions[1].begin() + find(w, 1, "1W3"));
  const ScheduleReport missing = check_schedule(w);
  EXPECT_EQ(missing.problem, Problem::incomplete) << missing.message;
  expect_contains(missing.message, {"rank 1 never runs the weight gradient (W) of stage 1, microbatch 3"});

  Schedule f = make_schedule(ScheduleKind::one_f_one_b, 3, 1, 3);
  f.actions[0].erase(f.actions[0].begin() + find(f, 0, "0F2"));
  const ScheduleReport dropped = check_schedule(f);
  EXPECT_EQ(dropped.problem, Problem::dependency) << dropped.message;
  expect_contains(dropped.message, {"rank 0 runs the send of the activation of stage 0, microbatch 2", "before the forward"});

  // Rank 0 holds stages 0 and 2: stage 0's backward needs stage 1's gradient, from rank 1.
  std::swap(s.actions[0][find(s, 0, "0BW0")], s.actions[0][find(s, 0, "0RECV_B0")]);
  const ScheduleReport order = check_schedule(s);
  EXPECT_EQ(order.problem, Problem::dependency) << order.message;
  expect_contains(order.message, {"rank 0 runs the backward of stage 0, microbatch 0", "from rank 1"});

  Schedule placed = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  placed.actions[0].push_back({ActionKind::forward, 1, 0});
  const ScheduleReport misplaced = check_schedule(placed);
  EXPECT_EQ(misplaced.problem, Problem::placement) << misplaced.message;
  expect_contains(misplaced.message, {"rank 0", "forward of stage 1, microbatch 0", "lives on rank 1"});
}

TEST(PipelineSchedule, NamesParseAndBadNumbersGetOneLine) {
  EXPECT_EQ(parse_schedule_name("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(parse_schedule_name("1F1B"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(parse_schedule_name("interleaved-1f1b"), ScheduleKind::interleaved_1f1b);
  EXPECT_EQ(parse_schedule_name("Interleaved1F1B"), ScheduleKind::interleaved_1f1b);  // torch's class name
  EXPECT_EQ(parse_schedule_name("zb_h1"), ScheduleKind::zb_h1);
  for (ScheduleKind k : kAll) EXPECT_EQ(parse_schedule_name(schedule_name(k)), k);
  try {
    parse_schedule_name("zbv", 3);
    FAIL() << "zbv parsed";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 3: unknown pipeline schedule 'zbv' (known: gpipe, 1f1b, interleaved-1f1b, zb-h1)");
  }
  try {
    make_schedule(ScheduleKind::interleaved_1f1b, 4, 2, 6, 1);
    FAIL() << "6 microbatches over 4 ranks accepted";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"rank 1: ", "interleaved-1f1b", "p=4", "v=2", "m=6", "multiple of the pipeline ranks (4)"});
  }
  try {
    make_schedule(ScheduleKind::zb_h1, 2, 2, 4);
    FAIL() << "zb-h1 with 2 stages per rank accepted";
  } catch (const ConfigError& e) {
    expect_contains(e.what(), {"cohort: ", "zb-h1", "v=2", "only interleaved-1f1b"});
  }
  EXPECT_THROW(make_schedule(ScheduleKind::one_f_one_b, 2, 1, 0), ConfigError);
  EXPECT_THROW(make_schedule(ScheduleKind::gpipe, 0, 1, 4), ConfigError);
}

TEST(PipelineSchedule, CsvHasOneLinePerRankInTorchsActionNotation) {
  const std::string csv = to_csv(make_schedule(ScheduleKind::zb_h1, 2, 1, 2));
  EXPECT_EQ(csv,
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0W0,0RECV_B1,0B1,0W1\n"
            "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1W0,1W1\n");
}

}  // namespace
}  // namespace cohort::pipeline
