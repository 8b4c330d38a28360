// Pipeline transfers on the step timeline (issue 49, item 1; docs/monitoring.md#the-timeline-panel),
// ranks as threads: each send and receive of run_schedule() is a comm span of its step and rank,
// "send" / "recv", the microbatch as its index, the tensor's bytes, and a receive ends after its
// send began (one clock).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/device_mesh.h"
#include "cohort/monitor.h"
#include "monitor/worker_monitor.h"
#include "parallel/pipeline/executor.h"
#include "runtime/agent_link/flight_recorder.h"
#include "support/thread_ranks.h"

namespace cohort::pipeline {
namespace {

constexpr int kRows = 3;
const int kWidths[] = {6, 5, 4, 3};  // stage s: Linear(kWidths[s], kWidths[s + 1]): each link its own size

std::mutex timeline_rng_mutex;  // the ranks share the process's random generator

std::vector<torch::nn::Sequential> timeline_stages(int S) {
  std::lock_guard<std::mutex> lock(timeline_rng_mutex);
  torch::manual_seed(3);
  std::vector<torch::nn::Sequential> out;
  for (int s = 0; s < S; ++s)
    out.push_back(torch::nn::Sequential(torch::nn::Linear(kWidths[s], kWidths[s + 1]), torch::nn::Tanh()));
  return out;
}

StepData timeline_data(int m, int S) {
  std::lock_guard<std::mutex> lock(timeline_rng_mutex);
  torch::manual_seed(5);
  StepData d;
  for (int i = 0; i < m; ++i) {
    d.inputs.push_back(torch::randn({kRows, kWidths[0]}));
    d.targets.push_back(torch::randn({kRows, kWidths[S]}));
  }
  return d;
}

// Bytes of what crosses the link between stage s and s + 1 (the activation one way, its gradient back).
int64_t link_bytes(int s) { return int64_t{kRows} * kWidths[s + 1] * 4; }

struct Transfer {
  std::string name, what;  // "send" / "recv", "pipeline activation" / "pipeline gradient"
  int index;
  int64_t bytes;
  double begin, end;  // job-clock seconds
};

TEST(PipelineTimeline, EverySendAndReceiveIsACommSpanPerMicrobatchWithItsBytes) {
  const int p = 3, m = 4, steps = 2;
  // Earlier tests of this binary ran pipelines under the process's monitor, which took no steps: its spans go.
  std::vector<detail::CommSpan> scratch(detail::FlightRecorder::kSpanCapacity);
  detail::flight_recorder().take_comm_spans(&detail::current_step_monitor(), scratch.data(), scratch.size());

  const Schedule schedule = make_schedule(ScheduleKind::one_f_one_b, p, 1, m);
  std::vector<std::vector<std::vector<Transfer>>> seen(p, std::vector<std::vector<Transfer>>(steps));
  testing::run_ranks(p, [&](std::shared_ptr<Context> ctx) {
    MonitorOptions options;
    options.enabled = true;
    Monitor mon(options);
    ScopedMonitor bind(mon);
    DeviceMesh mesh(ctx, {{"pp", p}});
    const int rank = mesh.coordinate("pp");
    auto all = timeline_stages(p);
    std::map<int, torch::nn::Sequential> mine{{rank, all[rank]}};
    monitor().step();  // the mesh's setup is not the steps'
    for (int step = 0; step < steps; ++step) {
      run_schedule(schedule, rank, mine, *mesh.group("pp"), timeline_data(m, p),
                   [](const at::Tensor& out, const at::Tensor& target) { return torch::mse_loss(out, target); });
      monitor().step();
      const StepRecord rec = *monitor().last();
      EXPECT_FALSE(rec.timeline.truncated) << "rank " << rank;
      for (const TimelineSpan& s : rec.timeline.spans) {
        const std::string what = s.what;
        if (what.rfind("pipeline ", 0) != 0) continue;
        EXPECT_STREQ(s.cat, "comm");
        EXPECT_STREQ(s.algorithm, "ring");
        EXPECT_GE(s.start_s, 0) << s.name << " " << s.index << ", rank " << rank;
        EXPECT_GE(s.dur_s, 0);
        EXPECT_LE(s.start_s + s.dur_s, rec.step_s + 1e-9) << s.name << " " << s.index << ", rank " << rank;
        const double begin = rec.timeline.t0 + s.start_s;
        seen[rank][step].push_back(Transfer{s.name, what, s.index, s.bytes, begin, begin + s.dur_s});
      }
    }
  });
  for (int r = 0; r < p; ++r) {
    // What rank r (stage r) must have sent and received: (name, what) -> bytes.
    std::map<std::pair<std::string, std::string>, int64_t> expected;
    if (r > 0) {
      expected[{"recv", "pipeline activation"}] = link_bytes(r - 1);
      expected[{"send", "pipeline gradient"}] = link_bytes(r - 1);
    }
    if (r < p - 1) {
      expected[{"send", "pipeline activation"}] = link_bytes(r);
      expected[{"recv", "pipeline gradient"}] = link_bytes(r);
    }
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("rank " + std::to_string(r) + " step " + std::to_string(step));
      std::map<std::pair<std::string, std::string>, std::vector<int>> by_kind;
      for (const Transfer& t : seen[r][step]) {
        ASSERT_TRUE(expected.count({t.name, t.what})) << t.name << " of a " << t.what;
        EXPECT_EQ(t.bytes, (expected.at({t.name, t.what}))) << t.name << " of " << t.what << " " << t.index;
        by_kind[{t.name, t.what}].push_back(t.index);
      }
      EXPECT_EQ(by_kind.size(), expected.size());
      for (auto& [kind, indices] : by_kind) {
        std::sort(indices.begin(), indices.end());
        EXPECT_EQ(indices, (std::vector<int>{0, 1, 2, 3})) << kind.first << " of " << kind.second;
      }
    }
  }
  // One clock: a receive ends after its send began, on every link, each step and microbatch.
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < p; ++r) {
      for (const Transfer& recv : seen[r][step]) {
        if (recv.name != "recv") continue;
        const int from = recv.what == "pipeline activation" ? r - 1 : r + 1;
        bool found = false;
        for (const Transfer& send : seen[from][step]) {
          if (send.name != "send" || send.what != recv.what || send.index != recv.index) continue;
          found = true;
          EXPECT_GE(recv.end, send.begin - 1e-6) << recv.what << " " << recv.index << " from rank " << from << " to "
                                                 << r << ", step " << step;
        }
        EXPECT_TRUE(found) << recv.what << " " << recv.index << " to rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace cohort::pipeline
