// The hub (src/hub/hub.h) on synthetic message sequences: the detectors (straggler with its
// phase, loss spike, NaN, stall), the Prometheus text parsed back line by line, the snapshot,
// subscriptions that fall behind, replay of a written log, and a log that cannot be written.
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

using nlohmann::json;
using namespace cohort::hub;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A worker's metrics message as the spec shows it. `extra_busy_s` goes into the named phase.
json metrics(int rank, int64_t step, double loss, double busy_s = 0.010, const std::string& slow_phase = "",
             double extra_s = 0, int restart = 0) {
  std::map<std::string, double> phases{{"data", 0.001}, {"forward", 0.004}, {"backward", 0.004}, {"optimizer", 0.001}};
  if (!slow_phase.empty()) phases[slow_phase] += extra_s;
  double busy = 0;
  for (auto& [k, v] : phases) busy += v;
  (void)busy_s;
  // Synchronous training: every rank's step takes as long as the slowest; the rest is comm_wait.
  const double step_s = 0.010 + extra_s + 0.002;
  json p = json::object();
  for (auto& [k, v] : phases) p[k] = v;
  p["comm_wait"] = step_s - busy;
  json m{{"type", "metrics"},  {"pid", 1000 + rank}, {"rank", rank},   {"world_size", 2},
         {"restart", restart}, {"step", step},       {"t", 1.7e9 + static_cast<double>(step)},
         {"step_s", step_s},   {"phases", p},        {"samples", 64},  {"samples_per_s", 64 / step_s},
         {"grad_norm", 1.5},   {"rss_bytes", 100000000}, {"comm_bytes", 1000}, {"comm_s", 0.001},
         {"busbw", 1e6}};
  if (std::isnan(loss)) m["scalars"] = {{"loss", "nan"}, {"lr", 0.01}};
  else m["scalars"] = {{"loss", loss}, {"lr", 0.01}};
  return m;
}

std::vector<json> events_of(const json& snapshot, const std::string& kind, const std::string& anomaly = "") {
  std::vector<json> out;
  for (const auto& e : snapshot["events"]) {
    if (e.value("kind", "") == kind && (anomaly.empty() || e.value("anomaly", "") == anomaly)) out.push_back(e);
  }
  return out;
}

json rank_of(const json& snapshot, int rank) {
  for (const auto& r : snapshot["ranks"]) {
    if (r["rank"] == rank) return r;
  }
  return nullptr;
}

long count_lines(const std::string& path) {
  std::ifstream in(path);
  return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "cohort_hub_XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Two ranks, `steps` steps; rank 1 slow in `phase` by extra_s from `from` on.
void feed_two_ranks(Hub& hub, int64_t first, int64_t steps, const std::string& phase = "", double extra_s = 0,
                    int64_t from = 0, double loss = 1.0) {
  for (int64_t s = first; s < first + steps; ++s) {
    const bool slow = !phase.empty() && s >= from;
    hub.worker_message(metrics(0, s, loss, 0.01, "", slow ? extra_s : 0), 0);
    hub.worker_message(metrics(1, s, loss, 0.01, slow ? phase : "", slow ? extra_s : 0), 0);
  }
}

}  // namespace

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
