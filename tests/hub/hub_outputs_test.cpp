// The hub's outputs (src/hub/outputs/): the Prometheus text parsed back line by line, subscriptions
// that fall behind, the event log written, replayed (the same snapshot, the same detector
// settings) and one that cannot be written. The detectors and state are hub_test.cpp's.
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

TEST(HubPrometheus, EverySampleHasATypedFamilyAndValidLabels) {
  HubOptions o;
  o.job_name = "we\"ird\\job\nname";
  Hub hub(o);
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 30, "backward", 0.03, 5);
  hub.worker_message(metrics(0, 30, std::nan("")), 0);
  const std::string text = hub.prometheus_text();
  std::map<std::string, std::string> types;
  std::set<std::string> helped, sampled;
  const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  const std::regex label_re(R"(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)\")");
  const std::regex value_re(R"([+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|NaN|[+-]Inf)");
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      EXPECT_TRUE(type == "gauge" || type == "counter") << line;
      EXPECT_EQ(types.count(name), 0u) << "family declared twice: " << name;
      types[name] = type;
      continue;
    }
    ASSERT_NE(line[0], '#') << line;
    ++samples;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    const std::string name = line.substr(0, std::min(brace, line.find(' ')));
    EXPECT_TRUE(std::regex_match(name, name_re)) << line;
    ASSERT_EQ(types.count(name), 1u) << "sample without a TYPE line: " << line;
    EXPECT_EQ(helped.count(name), 1u) << line;
    if (types[name] == "counter") EXPECT_NE(name.find("_total"), std::string::npos) << name;
    if (brace != std::string::npos) {
      const size_t close = line.rfind('}');
      ASSERT_NE(close, std::string::npos) << line;
      std::string labels = line.substr(brace + 1, close - brace - 1);
      // The labels, one by one, separated by commas, nothing left over.
      std::string rest = labels;
      std::smatch m;
      std::set<std::string> seen;
      while (!rest.empty()) {
        ASSERT_TRUE(std::regex_search(rest, m, label_re, std::regex_constants::match_continuous)) << line;
        EXPECT_TRUE(seen.insert(m[1]).second) << "label twice: " << line;
        rest = m.suffix();
        if (!rest.empty()) {
          ASSERT_EQ(rest[0], ',') << line;
          rest.erase(0, 1);
        }
      }
      EXPECT_EQ(seen.count("job"), 1u) << line;
      EXPECT_EQ(close + 1, space) << line;
    }
    EXPECT_TRUE(std::regex_match(line.substr(space + 1), value_re)) << line;
    sampled.insert(name);
  }
  EXPECT_GT(samples, 50);
  for (const char* family :
       {"cohort_up", "cohort_world_size", "cohort_restarts_total", "cohort_job_state", "cohort_job_samples_per_second",
        "cohort_rank_step", "cohort_rank_steps_total", "cohort_rank_state", "cohort_step_seconds",
        "cohort_phase_seconds", "cohort_samples_per_second", "cohort_grad_norm", "cohort_resident_memory_bytes",
        "cohort_comm_bytes_total", "cohort_allreduce_busbw_bytes_per_second", "cohort_scalar",
        "cohort_anomalies_total", "cohort_events_total"}) {
    EXPECT_EQ(sampled.count(family), 1u) << family;
  }
  EXPECT_EQ(types.count("cohort_cuda_memory_bytes"), 1u);
  EXPECT_NE(text.find("job=\"we\\\"ird\\\\job\\nname\""), std::string::npos);
  EXPECT_NE(text.find("cohort_anomalies_total{job=\"we\\\"ird\\\\job\\nname\",kind=\"straggler\"} 1"), std::string::npos);
  EXPECT_NE(text.find(",rank=\"1\",state=\"slow\"} 1"), std::string::npos);
  EXPECT_NE(text.find("cohort_rank_steps_total{job=\"we\\\"ird\\\\job\\nname\",rank=\"0\"} 31"), std::string::npos);
}

TEST(HubStream, MessagesInOrderThenResyncWhenBehind) {
  Hub hub({});
  auto sub = hub.subscribe();
  hub.round_started(0, 2, 0);
  hub.worker_message(metrics(0, 0, 1.0), 0);
  StreamMessage m;
  std::vector<std::string> names;
  while (sub->next(m, std::chrono::milliseconds(10))) names.push_back(m.event);
  ASSERT_GE(names.size(), 3u);
  EXPECT_EQ(names[0], "event");  // round_started
  EXPECT_EQ(names[1], "state");
  EXPECT_NE(std::find(names.begin(), names.end(), "metrics"), names.end());
  // A subscriber that does not read loses its backlog and is told to resync; the others are unharmed.
  auto slow = hub.subscribe();
  for (int64_t s = 1; s < 5000; ++s) hub.worker_message(metrics(0, s, 1.0), 0);
  ASSERT_TRUE(slow->next(m, std::chrono::milliseconds(10)));
  EXPECT_EQ(m.event, "resync");
  ASSERT_TRUE(slow->next(m, std::chrono::milliseconds(10)));
  EXPECT_EQ(m.event, "metrics");
  EXPECT_GT(json::parse(m.data)["step"].get<int>(), 100);
  // close() wakes a waiting reader at once and ends every stream.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hub.close();
  });
  auto reader = hub.subscribe();
  while (reader->next(m, std::chrono::milliseconds(10))) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(reader->next(m, std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  closer.join();
  EXPECT_FALSE(hub.subscribe()->next(m, std::chrono::milliseconds(1)));
}

TEST(HubLog, ReplayGivesTheSameSnapshot) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  o.job_name = "replayed";
  json live;
  {
    Hub hub(o);
    hub.job_event("start", "cohort run started", {{"nproc", 2}, {"nnodes", 1}, {"run_dir", dir.path()}});
    hub.job_event("rendezvous", "2 ranks on 1 node", {{"round", 0}, {"world_size", 2}, {"nodes", 1}});
    hub.round_started(0, 2, 0);
    feed_two_ranks(hub, 0, 20);
    feed_two_ranks(hub, 20, 30, "data", 0.04, 20);  // a straggler
    feed_two_ranks(hub, 50, 30);                    // ... that recovers (no event: the replay must compute it)
    feed_two_ranks(hub, 80, 1, "", 0, 0, 9.0);     // a spike
    hub.worker_message(metrics(1, 81, std::nan("")), 0);
    hub.worker_message({{"type", "event"}, {"pid", 1}, {"rank", 0}, {"kind", "checkpoint_saved"}, {"step", 80},
                        {"message", "checkpoint step-80 committed"}, {"t", 1.7e9}},
                       0);
    hub.job_event("failure", "rank 1 exited with code 3", {{"rank", 1}, {"node", 0}, {"reason", "exited with code 3"}});
    hub.job_event("restart", "restarting", {{"restarts", 1}, {"reason", "rank 1 exited with code 3"}});
    hub.round_started(1, 2, 1);
    for (int64_t s = 82; s < 90; ++s) {
      hub.worker_message(metrics(0, s, 1.0, 0.01, "", 0, 1), 0);
      hub.worker_message(metrics(1, s, 1.0, 0.01, "", 0, 1), 0);
    }
    hub.job_event("finished", "job succeeded after 1 restart", {{"exit_code", 0}, {"state", "succeeded"}});
    live = hub.snapshot();
    EXPECT_EQ(events_of(live, "anomaly", "straggler").size(), 1u);
    EXPECT_EQ(events_of(live, "anomaly", "loss_spike").size(), 1u);
    EXPECT_EQ(events_of(live, "anomaly", "nan").size(), 1u) << "flushed by the failure event";
  }
  Hub replay({});
  const size_t lines = replay.replay_file(dir.path() + "/events.jsonl");
  EXPECT_EQ(lines, 179u + 12u);  // metrics lines + events (the last: "recovered", which replay reads, not derives)
  const json again = replay.snapshot();
  EXPECT_EQ(again, live) << "live:\n" << live.dump(1).substr(0, 3000) << "\nreplayed:\n" << again.dump(1).substr(0, 3000);
  // Replay writes nothing.
  EXPECT_EQ(count_lines(dir.path() + "/events.jsonl"), static_cast<long>(lines));
  EXPECT_THROW(replay.replay_file(dir.path() + "/missing.jsonl"), cohort::ConfigError);
}

// The rank states a page sees while `cohort dashboard` replays a log (its "state" messages) are
// the ones the live hub's page saw, in the same order: the logged straggler event comes at the step
// the replayed rule flags the rank too, so the replay never shows slow, running, slow.
TEST(HubLog, ReplayStreamsTheLiveRankStates) {
  const auto rank1_states = [](Subscription& sub) {
    std::vector<std::string> states;
    StreamMessage m;
    while (sub.next(m, std::chrono::milliseconds(1))) {
      if (m.event != "state") continue;
      const json state = json::parse(m.data);
      for (const auto& r : state["ranks"]) {
        if (r["rank"] == 1 && (states.empty() || states.back() != r["state"])) states.push_back(r["state"]);
      }
    }
    return states;
  };
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  std::vector<std::string> live;
  {
    Hub hub(o);
    auto sub = hub.subscribe();
    hub.round_started(0, 2, 0);
    feed_two_ranks(hub, 0, 30);
    feed_two_ranks(hub, 30, 40, "forward", 0.03, 30);  // slow from step 30: flagged at 39
    feed_two_ranks(hub, 70, 40);                       // recovers (no event)
    hub.job_event("finished", "job succeeded", {{"exit_code", 0}, {"state", "succeeded"}});
    live = rank1_states(*sub);
  }
  ASSERT_EQ(live, (std::vector<std::string>{"starting", "running", "slow", "running", "finished"}));
  Hub replay({});
  auto sub = replay.subscribe();
  replay.replay_file(dir.path() + "/events.jsonl");
  EXPECT_EQ(rank1_states(*sub), live);
}

// A run judged with another straggler factor replays with that factor (logged in "start"), not
// the default: rank 1 at 2x is no straggler at factor 3, live or replayed.
TEST(HubLog, ReplayJudgesWithTheRunsLoggedDetectorSettings) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  o.straggler_factor = 3.0;
  {
    Hub hub(o);
    hub.job_event("start", "cohort run started", {{"detectors", {{"straggler_factor", 3.0}, {"straggler_window", 20}}}});
    hub.round_started(0, 2, 0);
    feed_two_ranks(hub, 0, 60, "forward", 0.010);  // rank 1 busy 20 ms vs 10 ms: 2x
    EXPECT_TRUE(events_of(hub.snapshot(), "anomaly", "straggler").empty());
  }
  Hub replay({});  // default factor 1.5 until the log says otherwise
  replay.replay_file(dir.path() + "/events.jsonl");
  EXPECT_NE(rank_of(replay.snapshot(), 1)["state"], "slow");
  Hub judged_by_default({});
  judged_by_default.round_started(0, 2, 0);
  feed_two_ranks(judged_by_default, 0, 60, "forward", 0.010);
  EXPECT_EQ(rank_of(judged_by_default.snapshot(), 1)["state"], "slow") << "the test's 2x must be a straggler at 1.5";
}

TEST(HubLog, LinesAreJsonWithTimeAndType) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  {
    Hub hub(o);
    hub.round_started(0, 2, 0);
    feed_two_ranks(hub, 0, 2);
    // The file is readable while the hub lives (flushed line by line).
    EXPECT_EQ(count_lines(dir.path() + "/events.jsonl"), 5);
  }
  std::istringstream in(slurp(dir.path() + "/events.jsonl"));
  std::string line;
  int metrics_lines = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    EXPECT_TRUE(j["t"].is_number());
    EXPECT_TRUE(j["type"] == "metrics" || j["type"] == "event");
    EXPECT_FALSE(j.contains("pid"));
    if (j["type"] == "metrics") {
      ++metrics_lines;
      EXPECT_EQ(j["node"], 0);
    }
  }
  EXPECT_EQ(metrics_lines, 4);
}

TEST(HubLog, AnUnwritableLogWarnsOnceAndTheHubGoesOn) {
  {
    HubOptions o;
    o.run_dir = "/dev/null/not-a-directory";
    testing::internal::CaptureStderr();
    Hub hub(o);
    hub.round_started(0, 2, 0);
    feed_two_ranks(hub, 0, 3);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("warning: cannot open the event log /dev/null/not-a-directory/events.jsonl"), std::string::npos)
        << err;
    EXPECT_EQ(rank_of(hub.snapshot(), 0)["step"], 2);
  }
  // A full disk: the log is /dev/full, whose writes fail with ENOSPC.
  TempDir dir;
  std::filesystem::create_symlink("/dev/full", dir.path() + "/events.jsonl");
  HubOptions o;
  o.run_dir = dir.path();
  testing::internal::CaptureStderr();
  Hub hub(o);
  hub.round_started(0, 2, 0);
  feed_two_ranks(hub, 0, 20);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: cannot write the event log"), std::string::npos) << err;
  EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
  size_t count = 0;
  for (size_t pos = 0; (pos = err.find("warning", pos)) != std::string::npos; ++pos) ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_EQ(rank_of(hub.snapshot(), 1)["step"], 19);
}

// The timeline panel's data (issue 49): each rank's last timeline_steps step timelines are in the
// snapshot, so that a page opened late draws them; a restart's rewind replaces the newer ones; a
// step with too many spans is cut to 512 and says so; a replay of the log keeps the same ones.
TEST(HubTimelines, TheLastStepsOfEveryRankInTheSnapshotBoundedAndReplayed) {
  TempDir dir;
  HubOptions o;
  o.run_dir = dir.path();
  o.timeline_steps = 5;
  auto with_timeline = [](int rank, int64_t step, size_t spans) {
    json m = metrics(rank, step, 1.0);
    json list = json::array();
    for (size_t i = 0; i < spans; ++i) list.push_back({"forward", "compute", 0.001 * static_cast<double>(i), 0.001, nullptr});
    m["timeline"] = {{"t0", 1.7e9 + static_cast<double>(step)}, {"clock_offset_s", 0.0}, {"clock_error_s", 1e-5}, {"spans", list}};
    return m;
  };
  json live;
  {
    Hub hub(o);
    hub.round_started(0, 2, 0);
    for (int64_t s = 1; s <= 12; ++s) {
      hub.worker_message(with_timeline(0, s, 3), 0);
      hub.worker_message(s == 12 ? with_timeline(1, s, 600) : metrics(1, s, 1.0), 0);  // rank 1: one step with spans
    }
    hub.worker_message(with_timeline(0, 10, 2), 0);  // rank 0 resumed from step 9
    live = hub.snapshot();
  }
  const json& tl = live["timelines"];
  ASSERT_TRUE(tl.contains("0") && tl.contains("1")) << tl.dump().substr(0, 500);
  std::vector<int64_t> steps;
  for (const auto& p : tl["0"]) steps.push_back(p["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{8, 9, 10})) << "the last 5 (8..12), then the rewind replaced 10..12";
  EXPECT_EQ(tl["0"].back()["timeline"]["spans"].size(), 2u);
  EXPECT_EQ(tl["0"].front()["timeline"]["spans"][0], json({"forward", "compute", 0.0, 0.001, nullptr}));
  ASSERT_EQ(tl["1"].size(), 1u);
  EXPECT_EQ(tl["1"][0]["timeline"]["spans"].size(), 512u);
  EXPECT_EQ(tl["1"][0]["timeline"]["truncated"], true);
  HubOptions ro = o;
  ro.run_dir.clear();
  Hub replayed(ro);
  replayed.replay_file(dir.path() + "/events.jsonl");
  EXPECT_EQ(replayed.snapshot()["timelines"], tl);
}
