// The step timeline (issue 49, docs/monitoring.md#the-timeline-panel), ranks as threads: every
// step's phase spans telescope from t0 to the step's end, each DDP bucket has one comm span that
// begins in backward or after it and ends before the optimizer, checkpoint I/O, a snapshot copy and
// recovery have theirs, the cap truncates, the metrics message carries it all, and the ranks'
// clocks agree. Real processes through `cohort run` (and `cohort trace`) are
// timeline_process_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/monitor.h"
#include "monitor/worker_monitor.h"
#include "runtime/clock/job_clock.h"
#include "support/ddp_fixtures.h"
#include "support/files.h"
#include "support/thread_ranks.h"
#include "worker_monitor_fixtures.h"

namespace {

using namespace worker_monitor_test;

const cohort::TimelineSpan* find_span(const cohort::StepRecord& r, const std::string& name) {
  for (const auto& s : r.timeline.spans)
    if (name == s.name) return &s;
  return nullptr;
}

// The five phases, in order, each beginning where the one before ended, from 0 to step_s.
void expect_phases_telescope(const cohort::StepRecord& rec, int rank) {
  const char* order[] = {"data", "forward", "backward", "comm_wait", "optimizer"};
  std::vector<const cohort::TimelineSpan*> phases;
  for (const auto& s : rec.timeline.spans)
    if (std::string(s.cat) == "compute") phases.push_back(&s);
  ASSERT_EQ(phases.size(), 5u) << "rank " << rank << " step " << rec.step;
  double at = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_STREQ(phases[i]->name, order[i]) << "rank " << rank << " step " << rec.step;
    EXPECT_NEAR(phases[i]->start_s, at, 1e-9) << order[i] << ", rank " << rank << " step " << rec.step;
    EXPECT_GE(phases[i]->dur_s, 0);
    EXPECT_NEAR(phases[i]->dur_s, *rec.phase(static_cast<cohort::Phase>(i)), 1e-9) << order[i];
    at = phases[i]->start_s + phases[i]->dur_s;
  }
  EXPECT_NEAR(at, rec.step_s, 1e-9) << "rank " << rank << " step " << rec.step;
}

void expect_buckets_as_they_ran(bool same_machine) {
  const int world = 2;
  const auto batches = make_batches(5, 8);
  std::vector<std::vector<cohort::StepRecord>> records(world);
  std::vector<size_t> buckets(world);
  RankOptions ro;
  ro.same_machine = same_machine;
  run_ranks(
      world,
      [&](std::shared_ptr<cohort::Context> ctx) {
        const int r = ctx->rank();
        cohort::Monitor mon(opts());
        cohort::ScopedMonitor bind(mon);
        SmallNet net;
        cohort::DDPOptions o;
        o.bucket_cap_mb = 1e-4;  // several buckets
        auto model = cohort::DistributedDataParallel(net, ctx, o);
        torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
        for (const auto& b : batches) {
          train_step(model, sgd, b, r, world);
          cohort::monitor().step();
          records[r].push_back(*cohort::monitor().last());
        }
        buckets[r] = static_cast<size_t>(model->stats().num_buckets);
      },
      ro);
  for (int r = 0; r < world; ++r) {
    ASSERT_GT(buckets[r], 1u);
    double previous_end = -1;
    for (size_t s = 1; s < records[r].size(); ++s) {  // the first step begins at its forward: no data phase
      const auto& rec = records[r][s];
      SCOPED_TRACE("rank " + std::to_string(r) + " step " + std::to_string(rec.step));
      EXPECT_FALSE(rec.timeline.truncated);
      if (previous_end >= 0) EXPECT_NEAR(rec.timeline.t0, previous_end, 1e-6);  // steps follow each other
      previous_end = rec.timeline.t0 + rec.step_s;
      expect_phases_telescope(rec, r);
      const auto* backward = find_span(rec, "backward");
      const auto* wait = find_span(rec, "comm_wait");
      ASSERT_TRUE(backward && wait);
      std::set<int> seen;
      for (const auto& span : rec.timeline.spans) {
        if (std::string(span.name) != "bucket") continue;
        EXPECT_STREQ(span.cat, "comm");
        EXPECT_STREQ(span.algorithm, same_machine ? "shm" : "ring");
        EXPECT_GT(span.bytes, 0);
        EXPECT_TRUE(seen.insert(span.index).second) << "bucket " << span.index << " twice";
        // Launched once its gradients were ready: in backward, or at its end; done before the optimizer.
        EXPECT_GE(span.start_s, backward->start_s - 1e-9) << "bucket " << span.index;
        EXPECT_LE(span.start_s + span.dur_s, wait->start_s + wait->dur_s + 1e-9) << "bucket " << span.index;
      }
      EXPECT_EQ(seen.size(), buckets[r]);
    }
  }
  // One clock: the ranks (threads of one process, one steady clock) measured an offset of ~0.
  const auto clock = cohort::detail::clock_offset();
  // Within its own error; the absolute bound only catches a broken measurement (a wrong sign or
  // clock is seconds off): a loaded machine stretches the round trips past a millisecond.
  EXPECT_LE(std::fabs(clock.offset_s), clock.error_s + 1e-9);
  EXPECT_LT(std::fabs(clock.offset_s), 0.05);
  EXPECT_GT(clock.measured_ns, 0);
}

TEST(Timeline, PhasesTelescopeAndBucketsRunInOrAfterBackwardOverGloo) { expect_buckets_as_they_ran(false); }
TEST(Timeline, PhasesTelescopeAndBucketsRunInOrAfterBackwardOverSharedMemory) { expect_buckets_as_they_ran(true); }

TEST(Timeline, CheckpointCaptureWriteAndRecoveryHaveSpans) {
  const cohort::testing::TempDir tmp("cohort-timeline-ckpt");  // removed even when an assertion fails
  const std::string dir = tmp.path();
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const cohort::TrainingState state{model.ptr().get(), &sgd, nullptr};
    {
      cohort::Monitor mon(opts());
      cohort::ScopedMonitor bind(mon);
      cohort::Checkpointer ckpt(dir, ctx, cohort::CheckpointOptions{});
      EXPECT_FALSE(ckpt.restore_latest(state).has_value());  // nothing to restore: no recovery span
      cohort::monitor().step();
      EXPECT_EQ(find_span(*cohort::monitor().last(), "recovery"), nullptr);
      ckpt.save(state);
      cohort::monitor().step();
      const auto rec = *cohort::monitor().last();
      const auto* capture = find_span(rec, "ckpt_capture");
      const auto* write = find_span(rec, "ckpt_write");
      ASSERT_TRUE(capture && write);
      EXPECT_STREQ(capture->cat, "io");
      EXPECT_STREQ(write->cat, "io");
      EXPECT_GE(capture->start_s, 0);
      EXPECT_GE(write->start_s, capture->start_s);  // written after it was captured
      EXPECT_LE(write->start_s + write->dur_s, rec.step_s + 1e-9);
      cohort::monitor().step();
      EXPECT_EQ(find_span(*cohort::monitor().last(), "ckpt_write"), nullptr);  // taken once
    }
    cohort::Monitor fresh(opts());
    cohort::ScopedMonitor bind(fresh);
    cohort::Checkpointer ckpt(dir, ctx, cohort::CheckpointOptions{});
    ASSERT_TRUE(ckpt.restore_latest(state).has_value());
    cohort::monitor().step();
    const auto restored = *cohort::monitor().last();
    const auto* recovery = find_span(restored, "recovery");
    ASSERT_NE(recovery, nullptr);
    EXPECT_STREQ(recovery->cat, "compute");
    EXPECT_GT(recovery->dur_s, 0);
  });
}

// An in-memory snapshot's copy (maybe_save with snapshot_every_steps) is its own io span, not a
// checkpoint's capture.
TEST(Timeline, ASnapshotCopyHasItsSpan) {
  const cohort::testing::TempDir tmp("cohort-timeline-snap");  // removed even when an assertion fails
  const std::string dir = tmp.path();
  run_ranks(1, [&](std::shared_ptr<cohort::Context> ctx) {
    SmallNet net;
    auto model = cohort::DistributedDataParallel(net, ctx);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const cohort::TrainingState state{model.ptr().get(), &sgd, nullptr};
    cohort::Monitor mon(opts());
    cohort::ScopedMonitor bind(mon);
    cohort::CheckpointOptions o;
    o.snapshot_every_steps = 1;
    o.snapshot_dir = dir + "/snapshots";
    cohort::Checkpointer ckpt(dir + "/checkpoints", ctx, o);
    EXPECT_FALSE(ckpt.maybe_save(state));  // a snapshot only: no disk save started
    ckpt.wait();
    cohort::monitor().step();
    const auto rec = *cohort::monitor().last();
    const auto* copy = find_span(rec, "snapshot_copy");
    ASSERT_NE(copy, nullptr);
    EXPECT_STREQ(copy->cat, "io");
    EXPECT_GE(copy->start_s, 0);
    EXPECT_LE(copy->start_s + copy->dur_s, rec.step_s + 1e-9);
    EXPECT_EQ(find_span(rec, "ckpt_capture"), nullptr);
  });
}

TEST(Timeline, SpansOverTheCapAreTruncatedAndSaidSo) {
  cohort::Monitor mon(opts());
  auto& m = cohort::detail::MonitorInternals::of(mon);
  for (int i = 0; i < 200; ++i) {  // 400 phase spans: gradient accumulation gone wild
    m.mark(cohort::Phase::forward);
    m.mark(cohort::Phase::backward);
  }
  mon.step();
  auto rec = *mon.last();
  EXPECT_TRUE(rec.timeline.truncated);
  EXPECT_EQ(rec.timeline.spans.size(), static_cast<size_t>(cohort::kMaxTimelineSpans));
  const auto j = nlohmann::json::parse(cohort::detail::metrics_message(rec, cohort::detail::WorkerIdentity{}));
  EXPECT_EQ(j["timeline"]["truncated"], true);
  EXPECT_EQ(j["timeline"]["spans"].size(), static_cast<size_t>(cohort::kMaxTimelineSpans));
  m.mark(cohort::Phase::forward);
  mon.step();
  EXPECT_FALSE(mon.last()->timeline.truncated);  // the next step starts afresh
}

TEST(Timeline, TheMetricsMessageCarriesTheRecordFormat) {
  cohort::StepRecord r;
  r.step = 3;
  r.step_s = 0.5;
  r.timeline.t0 = 1234.5;
  r.timeline.clock_offset_s = -5.0;
  r.timeline.clock_error_s = 2e-5;
  cohort::TimelineSpan fwd;
  fwd.name = "forward";
  fwd.cat = "compute";
  fwd.start_s = 0.1;
  fwd.dur_s = 0.2;
  cohort::TimelineSpan bucket;
  bucket.name = "bucket";
  bucket.cat = "comm";
  bucket.start_s = 0.25;
  bucket.dur_s = 0.05;
  bucket.index = 2;
  bucket.bytes = 4096;
  bucket.algorithm = "ring";
  bucket.what = "ddp bucket";
  cohort::TimelineSpan write;
  write.name = "ckpt_write";
  write.cat = "io";
  write.start_s = -0.1;  // began in the step before
  write.dur_s = 0.3;
  r.timeline.spans = {fwd, bucket, write};
  const auto j = nlohmann::json::parse(cohort::detail::metrics_message(r, cohort::detail::WorkerIdentity{}));
  const auto& t = j.at("timeline");
  EXPECT_EQ(t["t0"], 1234.5);
  EXPECT_EQ(t["clock_offset_s"], -5.0);
  EXPECT_EQ(t["clock_error_s"], 2e-5);
  EXPECT_FALSE(t.contains("truncated"));
  ASSERT_EQ(t["spans"].size(), 3u);
  EXPECT_EQ(t["spans"][0], nlohmann::json::parse(R"(["forward","compute",0.1,0.2,null])"));
  EXPECT_EQ(t["spans"][1],
            nlohmann::json::parse(R"(["bucket","comm",0.25,0.05,{"index":2,"bytes":4096,"algorithm":"ring","what":"ddp bucket"}])"));
  EXPECT_EQ(t["spans"][2], nlohmann::json::parse(R"(["ckpt_write","io",-0.1,0.3,null])"));
}

}  // namespace
