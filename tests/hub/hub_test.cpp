// The hub (src/hub/hub.h) on synthetic message sequences: the detectors (straggler with its
// phase, loss spike, NaN, stall), the job's state and its recoveries, the snapshot, and input that
// is malformed. Its outputs (Prometheus, streams, the event log) are hub_outputs_test.cpp's.
// No processes, no torch: the messages are what workers and the launcher would send.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cohort/error.h"
#include "hub/detector_rules.h"
#include "hub/hub.h"
#include "hub/outputs/prometheus_text.h"
#include "hub_fixtures.h"
#include "support/files.h"

using nlohmann::json;
using namespace cohort::hub;
using namespace hub_test;
using cohort::testing::count_lines;
using cohort::testing::slurp;
using cohort::testing::TempDir;

TEST(HubRules, MedianAndSpike) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
  std::vector<double> recent(10, 1.0);
  EXPECT_TRUE(is_loss_spike(3.5, recent, 3.0));
  EXPECT_FALSE(is_loss_spike(2.9, recent, 3.0));
  recent.pop_back();
  EXPECT_FALSE(is_loss_spike(100, recent, 3.0)) << "fewer than 10 steps: no verdict";
}

TEST(HubRules, StragglerNamesRankAndPhase) {
  std::vector<RankWindow> w(4);
  for (int r = 0; r < 4; ++r) {
    w[r].rank = r;
    for (int i = 0; i < 20; ++i) {
      const double backward = r == 2 ? 0.030 : 0.004;
      w[r].busy.push_back(0.001 + 0.004 + backward + 0.001);
      w[r].phases["data"].push_back(0.001);
      w[r].phases["forward"].push_back(0.004);
      w[r].phases["backward"].push_back(backward);
      w[r].phases["optimizer"].push_back(0.001);
    }
  }
  auto v = find_stragglers(w, 1.5);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].rank, 2);
  EXPECT_EQ(v[0].phase, "backward");
  EXPECT_NEAR(v[0].phase_excess_s, 0.026, 1e-9);
}

TEST(HubDetect, StragglerEventNamesRankAndPhaseOnce) {
  Hub hub({});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 10);
  EXPECT_TRUE(events_of(hub.snapshot(), "anomaly", "straggler").empty());
  feed_two_ranks(hub, 10, 40, "forward", 0.030, 10);  // rank 1's forward takes 30 ms more
  const json snap = hub.snapshot();
  const auto ev = events_of(snap, "anomaly", "straggler");
  ASSERT_EQ(ev.size(), 1u) << snap["events"].dump(1);
  EXPECT_EQ(ev[0]["rank"], 1);
  EXPECT_EQ(ev[0]["phase"], "forward");
  EXPECT_NE(ev[0]["message"].get<std::string>().find("rank 1"), std::string::npos);
  EXPECT_EQ(rank_of(snap, 1)["state"], "slow");
  EXPECT_EQ(rank_of(snap, 1)["straggler"], true);
  EXPECT_EQ(rank_of(snap, 1)["slow_phase"], "forward");
  EXPECT_EQ(rank_of(snap, 0)["state"], "running");
  // Back to normal: the state clears without another event.
  feed_two_ranks(hub, 50, 40);
  const json after = hub.snapshot();
  EXPECT_EQ(rank_of(after, 1)["state"], "running");
  EXPECT_EQ(events_of(after, "anomaly", "straggler").size(), 1u);
}

TEST(HubDetect, NoStragglerAmongEqualRanks) {
  Hub hub({});
  hub.round_started(0, 4, 0);
  unsigned seed = 7;
  for (int64_t s = 0; s < 200; ++s) {
    for (int r = 0; r < 4; ++r) {
      seed = seed * 1103515245u + 12345u;
      const double jitter = static_cast<double>((seed >> 16) % 1000) / 1000.0 * 0.003;  // up to 3 ms noise
      json m = metrics(r, s, 1.0);
      m["phases"]["forward"] = 0.004 + jitter;
      m["step_s"] = 0.015;
      hub.worker_message(m, 0);
    }
  }
  const json snap = hub.snapshot();
  EXPECT_TRUE(events_of(snap, "anomaly", "straggler").empty()) << snap["events"].dump(1);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rank_of(snap, r)["state"], "running");
}

TEST(HubDetect, LossSpikeOncePerSpike) {
  Hub hub({});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 30, "", 0, 0, 1.0);
  feed_two_ranks(hub, 30, 3, "", 0, 0, 5.0);  // three spiking steps: one spike
  feed_two_ranks(hub, 33, 5, "", 0, 0, 1.0);
  const json snap = hub.snapshot();
  auto ev = events_of(snap, "anomaly", "loss_spike");
  ASSERT_EQ(ev.size(), 1u) << snap["events"].dump(1);
  EXPECT_EQ(ev[0]["step"], 30);
  EXPECT_DOUBLE_EQ(ev[0]["loss"].get<double>(), 5.0);
  feed_two_ranks(hub, 38, 1, "", 0, 0, 6.0);  // a second spike
  EXPECT_EQ(events_of(hub.snapshot(), "anomaly", "loss_spike").size(), 2u);
  // History: one point per job step, the mean of the ranks' losses.
  const json h = hub.snapshot()["history"];
  ASSERT_EQ(h.size(), 39u);
  EXPECT_EQ(h[30]["step"], 30);
  EXPECT_DOUBLE_EQ(h[30]["loss"].get<double>(), 5.0);
}

TEST(HubDetect, NanFromMetricsWhenTheWorkerSaidNothing) {
  Hub hub({});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 5);
  hub.worker_message(metrics(0, 5, 1.0), 0);
  hub.worker_message(metrics(1, 5, std::nan("")), 0);
  hub.tick(wall_now());  // within the grace for the worker's own event: nothing yet
  EXPECT_TRUE(events_of(hub.snapshot(), "anomaly", "nan").empty());
  hub.tick(wall_now() + 2);
  const json snap = hub.snapshot();
  auto ev = events_of(snap, "anomaly", "nan");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["rank"], 1);
  EXPECT_EQ(ev[0]["step"], 5);
  EXPECT_EQ(ev[0]["what"], "loss");
  EXPECT_EQ(rank_of(snap, 1)["scalars"]["loss"], "nan");
  EXPECT_TRUE(snap["history"].back()["loss"] == "nan") << snap["history"].back().dump();
  EXPECT_NE(hub.prometheus_text().find("cohort_scalar{job=\"\",rank=\"1\",name=\"loss\"} NaN"), std::string::npos);
}

TEST(HubDetect, NanEventOfTheWorkerIsNotDuplicated) {
  Hub hub({});
  hub.round_started(0, 1, 0);
  json m = metrics(0, 3, 1.0);
  m["grad_norm"] = "inf";
  hub.worker_message(m, 0);
  hub.worker_message({{"type", "event"}, {"pid", 1000}, {"rank", 0}, {"t", 1.7e9}, {"kind", "anomaly"}, {"step", 3},
                      {"message", "rank 0: grad_norm is inf at step 3; policy stop"}, {"anomaly", "nan"},
                      {"policy", "stop"}, {"what", "grad_norm"}},
                     0);
  hub.tick(wall_now() + 5);
  auto ev = events_of(hub.snapshot(), "anomaly", "nan");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["policy"], "stop");
  EXPECT_EQ(ev[0]["node"], 0);
  EXPECT_FALSE(ev[0].contains("pid"));
}

TEST(HubDetect, StallAfterTimeoutOnceThenRecovers) {
  HubOptions o;
  o.stall_timeout_s = 60;
  Hub hub(o);
  hub.round_started(0, 2, 0);
  hub.tick(wall_now() + 1000);  // no step seen yet this round: not a stall
  EXPECT_TRUE(events_of(hub.snapshot(), "anomaly", "stall").empty());
  feed_two_ranks(hub, 0, 3);
  hub.tick(wall_now() + 30);
  EXPECT_TRUE(events_of(hub.snapshot(), "anomaly", "stall").empty());
  hub.tick(wall_now() + 61);
  hub.tick(wall_now() + 90);
  json snap = hub.snapshot();
  ASSERT_EQ(events_of(snap, "anomaly", "stall").size(), 1u);
  EXPECT_EQ(rank_of(snap, 0)["state"], "stalled");
  EXPECT_EQ(rank_of(snap, 1)["state"], "stalled");
  feed_two_ranks(hub, 3, 1);
  snap = hub.snapshot();
  EXPECT_EQ(rank_of(snap, 0)["state"], "running");
  hub.tick(wall_now() + 200);
  EXPECT_EQ(events_of(hub.snapshot(), "anomaly", "stall").size(), 2u) << "a new stall after progress is reported again";
}

TEST(HubState, FailureRestartRoundKeepHistories) {
  Hub hub({});
  hub.job_event("start", "cohort run started", {{"nproc", 2}, {"nnodes", 1}});
  hub.job_event("rendezvous", "2 ranks", {{"round", 0}, {"world_size", 2}, {"nodes", 1}});
  hub.round_started(0, 2, 0);
  json snap = hub.snapshot();
  EXPECT_EQ(snap["job"]["state"], "running");
  EXPECT_EQ(rank_of(snap, 0)["state"], "starting");
  feed_two_ranks(hub, 0, 5);
  hub.job_event("failure", "rank 1 (node 0, local rank 1, pid 4242) was killed by signal 9 (SIGKILL: Killed)",
                {{"rank", 1}, {"node", 0}, {"reason", "was killed by signal 9 (SIGKILL: Killed)"}});
  snap = hub.snapshot();
  EXPECT_EQ(rank_of(snap, 1)["state"], "failed");
  EXPECT_EQ(rank_of(snap, 1)["reason"], "was killed by signal 9 (SIGKILL: Killed)");
  hub.job_event("restart", "restarting (restart 1 of 3)", {{"restarts", 1}, {"reason", "rank 1 failed"}});
  snap = hub.snapshot();
  EXPECT_EQ(snap["job"]["state"], "restarting");
  EXPECT_EQ(rank_of(snap, 0)["state"], "restarting");
  EXPECT_EQ(snap["job"]["restarts"], 1);
  // A report of round 0's workers arriving after round 1 started is dropped.
  hub.round_started(1, 2, 1);
  hub.worker_message(metrics(0, 99, 1.0, 0.01, "", 0, /*restart=*/0), 0);
  snap = hub.snapshot();
  EXPECT_EQ(rank_of(snap, 0)["state"], "starting");
  EXPECT_EQ(rank_of(snap, 1)["state"], "starting");
  EXPECT_EQ(snap["job"]["round"], 1);
  EXPECT_EQ(snap["history"].size(), 5u) << "histories survive a restart";
  EXPECT_EQ(snap["rank_history"]["0"].size(), 5u);
  hub.worker_message(metrics(0, 5, 1.0, 0.01, "", 0, 1), 0);
  EXPECT_EQ(rank_of(hub.snapshot(), 0)["state"], "running");
  hub.job_event("finished", "job succeeded", {{"exit_code", 0}, {"state", "succeeded"}});
  snap = hub.snapshot();
  EXPECT_EQ(snap["job"]["state"], "succeeded");
  EXPECT_EQ(rank_of(snap, 0)["state"], "finished");
}

// A failure, the next round, its restore and its first step make one "recovered" event: the cause,
// where the state came from, the steps the job went back, the seconds from failure to that step.
TEST(HubState, ARecoveryIsOneEventWithCauseSourceStepsLostAndTime) {
  Hub hub({});
  hub.job_event("start", "cohort run started", {{"nproc", 2}, {"nnodes", 1}});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 10);  // steps 0..9
  hub.job_event("failure", "rank 1 was killed", {{"rank", 1}, {"node", 0}, {"reason", "was killed by signal 9 (SIGKILL: Killed)"}});
  const double failed_at = events_of(hub.snapshot(), "failure").at(0)["t"].get<double>();
  hub.job_event("failure", "rank 0 lost its peer", {{"rank", 0}, {"node", 0}, {"reason", "exited with code 1"}});
  hub.job_event("restart", "restarting", {{"restarts", 1}, {"reason", "rank 1 failed"}});
  hub.round_started(1, 2, 1);
  EXPECT_TRUE(events_of(hub.snapshot(), "recovered").empty()) << "not before the new round's first step";
  hub.worker_message({{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "checkpoint_restored"}, {"step", 8},
                      {"message", "restored"}, {"t", failed_at + 0.1},
                      {"fields", {{"path", "/dev/shm/x/step-00000008"}, {"source", "snapshot"}, {"seconds", 0.004}}}},
                     0);
  for (int64_t s = 9; s < 12; ++s) {
    for (int r = 0; r < 2; ++r) {
      json m = metrics(r, s, 1.0, 0.01, "", 0, /*restart=*/1);
      m["t"] = failed_at + 0.25 + 0.01 * static_cast<double>(s - 9);
      hub.worker_message(m, 0);
    }
  }
  const auto recovered = events_of(hub.snapshot(), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  const json& e = recovered[0];
  EXPECT_EQ(e["cause"], "was killed by signal 9 (SIGKILL: Killed)") << "the round's first failure is the cause";
  EXPECT_EQ(e["source"], "snapshot");
  EXPECT_EQ(e["restored_step"], 8);
  EXPECT_EQ(e["steps_lost"], 1) << "step 9 was reached before the failure";
  EXPECT_NEAR(e["seconds"].get<double>(), 0.25, 1e-6);
  EXPECT_EQ(e["path"], "/dev/shm/x/step-00000008");
  EXPECT_NE(e["message"].get<std::string>().find("in-memory snapshot of step 8, 1 step lost"), std::string::npos) << e;
  EXPECT_NE(hub.prometheus_text().find("cohort_recovery_steps_lost_total{job=\"\"} 1\n"), std::string::npos) << hub.prometheus_text();
  // Without anything to restore, the next failure's recovery starts the job over.
  hub.job_event("failure", "rank 0 was killed", {{"rank", 0}, {"node", 0}, {"reason", "was killed by signal 9"}});
  hub.round_started(2, 2, 2);
  hub.worker_message(metrics(0, 0, 1.0, 0.01, "", 0, 2), 0);
  const auto both = events_of(hub.snapshot(), "recovered");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1]["source"], "none");
  EXPECT_EQ(both[1]["steps_lost"], 11);
}

// A worker replaced in place (--keep-survivors): the survivor may report a step it took before it
// noticed the failure; the recovery ends only at the first step after the restore.
TEST(HubState, AnInPlaceRepairEndsAtTheFirstStepAfterTheRestore) {
  Hub hub({});
  hub.job_event("start", "cohort run started", {{"nproc", 2}, {"nnodes", 1}});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 10);  // steps 0..9
  hub.job_event("failure", "rank 0 was killed", {{"rank", 0}, {"node", 0}, {"reason", "was killed by signal 9"}});
  const double failed_at = events_of(hub.snapshot(), "failure").at(0)["t"].get<double>();
  hub.job_event("replaced", "a warm spare replaces it", {{"rank", 0}, {"generation", 1}, {"restarts", 1}});
  json late = metrics(1, 10, 1.0, 0.01, "", 0, 0);  // the survivor's step from before it noticed
  late["t"] = failed_at + 0.01;
  hub.worker_message(late, 0);
  EXPECT_TRUE(events_of(hub.snapshot(), "recovered").empty()) << "a survivor's step from before the restore";
  hub.worker_message({{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "checkpoint_restored"}, {"step", 9},
                      {"message", "restored"}, {"t", failed_at + 0.1},
                      {"fields", {{"path", "/dev/shm/x/step-00000009"}, {"source", "snapshot"}, {"seconds", 0.004}}}},
                     0);
  json first = metrics(0, 10, 1.0, 0.01, "", 0, 0);
  first["t"] = failed_at + 0.15;
  hub.worker_message(first, 0);
  const auto recovered = events_of(hub.snapshot(), "recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0]["source"], "snapshot");
  EXPECT_EQ(recovered[0]["steps_lost"], 1) << "step 10 was reached before the restore";
  EXPECT_NEAR(recovered[0]["seconds"].get<double>(), 0.15, 1e-6);
}

TEST(HubState, SnapshotCarriesWhatThePageDraws) {
  HubOptions o;
  o.job_name = "mnist";
  Hub hub(o);
  hub.job_event("start", "started", {{"run_dir", "/tmp/x"}});
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 3);
  const json snap = hub.snapshot();
  EXPECT_EQ(snap["job"]["name"], "mnist");
  EXPECT_EQ(snap["job"]["world_size"], 2);
  EXPECT_EQ(snap["job"]["step"], 2);
  EXPECT_EQ(snap["job"]["run_dir"], "/tmp/x");
  EXPECT_TRUE(snap["job"]["started_at"].is_number());
  EXPECT_GT(snap["job"]["samples_per_s"].get<double>(), 0);
  ASSERT_EQ(snap["ranks"].size(), 2u);
  const json r0 = rank_of(snap, 0);
  for (const char* key : {"rank", "node", "state", "reason", "step", "step_s", "phases", "samples_per_s", "scalars",
                          "grad_norm", "rss_bytes", "busbw", "straggler"}) {
    EXPECT_TRUE(r0.contains(key)) << key;
  }
  EXPECT_EQ(r0["step"], 2);
  EXPECT_DOUBLE_EQ(r0["scalars"]["loss"].get<double>(), 1.0);
  ASSERT_EQ(snap["history"].size(), 3u);
  EXPECT_TRUE(snap["history"][0].contains("samples_per_s"));
  EXPECT_EQ(snap["rank_history"]["1"].size(), 3u);
  EXPECT_TRUE(snap["rank_history"]["1"][0]["phases"].contains("forward"));
  EXPECT_EQ(events_of(snap, "round_started").size(), 1u);
}

TEST(HubInput, MalformedMessagesAreDropped) {
  Hub hub({});
  hub.worker_message(json::array(), 0);
  hub.worker_message({{"type", "metrics"}}, 0);
  hub.worker_message({{"type", "metrics"}, {"rank", "zero"}, {"step", 1}}, 0);
  hub.worker_message({{"type", "metrics"}, {"rank", -1}, {"step", 1}}, 0);
  hub.worker_message({{"type", "heartbeat"}, {"rank", 0}, {"step", 1}}, 0);
  hub.worker_message({{"type", "event"}, {"rank", 0}}, 0);
  const json snap = hub.snapshot();
  EXPECT_TRUE(snap["ranks"].empty());
  EXPECT_TRUE(snap["events"].empty());
  // A minimal metrics message (no phases, no scalars) is fine.
  hub.worker_message({{"type", "metrics"}, {"rank", 0}, {"step", 1}, {"step_s", 0.1}}, 3);
  EXPECT_EQ(rank_of(hub.snapshot(), 0)["node"], 3);
  EXPECT_FALSE(hub.prometheus_text().empty());
}

TEST(HubInput, WrongTypesNeverThrow) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  Hub hub(o);
  hub.round_started(0, 2, 0);
  const std::vector<json> junk{
      {{"type", "metrics"}, {"rank", 0}, {"step", 1}, {"scalars", "x"}, {"phases", 3}, {"step_s", "slow"}},
      {{"type", "metrics"}, {"rank", 1}, {"step", 1.5}},
      {{"type", "metrics"}, {"rank", 1e300}, {"step", 1}},
      {{"type", "metrics"}, {"rank", 1}, {"step", 2}, {"scalars", {{"loss", {1, 2}}}}, {"grad_norm", json::object()},
       {"phases", {{"forward", "nan"}, {"comm_wait", nullptr}}}, {"t", "late"}, {"restart", "x"}},
      {{"type", "event"}, {"rank", 0}, {"kind", "anomaly"}, {"anomaly", 5}, {"phase", {1}}, {"message", 7}},
      {{"type", "event"}, {"rank", 1}, {"kind", "anomaly"}, {"anomaly", "straggler"}, {"phase", 2}},
      {{"type", "event"}, {"rank", 0}, {"kind", "finished"}, {"state", false}, {"fields", "no"}},
      {{"type", "event"}, {"rank", 0}, {"kind", "round_started"}, {"world_size", -5}},
      {{"type", "event"}, {"rank", 0}, {"kind", "failure"}, {"reason", 3}},
  };
  for (const auto& m : junk) EXPECT_NO_THROW(hub.worker_message(m, 0)) << m.dump();
  hub.job_event("start", "bad \xff bytes", {{"argv", {"./train", "--name=\xfe\xff"}}});
  EXPECT_NO_THROW(hub.tick(wall_now() + 100));
  EXPECT_NO_THROW(hub.snapshot().dump());
  EXPECT_NO_THROW(hub.prometheus_text());
  // And the same lines read back from a log, with some that are not JSON at all.
  std::string text = slurp(dir.path() + "/events.jsonl");
  text += "{not json\n[1,2]\n{\"type\":\"metrics\",\"rank\":\"0\"}\n{\"type\":\"event\",\"kind\":\"round_started\",\"world_size\":1e12}\n";
  Hub replay({});
  EXPECT_NO_THROW(replay.replay_text(text));
  EXPECT_NO_THROW(replay.snapshot().dump());
  EXPECT_NO_THROW(replay.prometheus_text());
}

// Issue 50: the world's size and the job's state are the launcher's. A worker's datagram (anyone on
// the machine can send one) that claims a round of 2^20 ranks, a rank outside the world, a failure,
// the job's end or a stall changes none of it, and is not logged, so a replay does not see it either.
TEST(HubInput, WorkersCannotResizeTheWorldOrEndTheJob) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  Hub hub(o);
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 3);
  const std::vector<json> forged{
      {{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "round_started"}, {"round", 1}, {"world_size", 1048576}, {"restart", 0}},
      {{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "rendezvous"}, {"world_size", 1048576}},
      {{"type", "metrics"}, {"pid", 1}, {"rank", 1000000}, {"step", 3}, {"step_s", 0.1}},
      {{"type", "metrics"}, {"pid", 1}, {"rank", 2}, {"step", 3}, {"step_s", 0.1}},
      {{"type", "event"}, {"pid", 1}, {"rank", (1 << 24) - 1}, {"kind", "checkpoint_saved"}, {"step", 3}},
      {{"type", "event"}, {"pid", 1}, {"rank", 1}, {"kind", "failure"}, {"reason", "forged"}},
      {{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "finished"}, {"state", "failed"}},
      {{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "anomaly"}, {"anomaly", "stall"}},
      {{"type", "event"}, {"pid", 1}, {"rank", 1}, {"kind", "anomaly"}, {"fields", {{"anomaly", "straggler"}}}},
  };
  for (const auto& m : forged) hub.worker_message(m, 0);
  const json snap = hub.snapshot();
  EXPECT_EQ(snap["ranks"].size(), 2u);
  EXPECT_EQ(snap["job"]["world_size"], 2);
  EXPECT_EQ(snap["job"]["state"], "running");
  EXPECT_EQ(rank_of(snap, 0)["state"], "running");
  EXPECT_EQ(rank_of(snap, 1)["state"], "running");
  EXPECT_EQ(snap["events"].size(), 1u) << snap["events"].dump(1);  // the launcher's round_started
  // What a worker does send still counts.
  hub.worker_message({{"type", "event"}, {"pid", 1}, {"rank", 1}, {"kind", "anomaly"}, {"step", 3}, {"anomaly", "nan"},
                      {"what", "loss"}, {"policy", "warn"}},
                     0);
  hub.worker_message({{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "checkpoint_saved"}, {"step", 3}}, 0);
  EXPECT_EQ(hub.snapshot()["events"].size(), 3u);
  Hub replay({});
  replay.replay_file(dir.path() + "/events.jsonl");
  EXPECT_EQ(replay.snapshot()["ranks"].size(), 2u);
  EXPECT_EQ(replay.snapshot()["job"]["world_size"], 2);
}
