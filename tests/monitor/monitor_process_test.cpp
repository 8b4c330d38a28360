// Monitoring through `cohort run` with real processes: the agent's run directory, events.jsonl,
// the dashboard's URL and /metrics, failures, restarts and two nodes forwarding to the leader.
//
// Two kinds of worker:
//  * metrics_probe (this folder, here): a fake worker without torch that sends exactly the messages
//    a worker's monitor() sends, with numbers chosen by its flags — fast and exact;
//  * the Fashion-MNIST example with its test flags (--inject-nan-step/-rank, --slow-rank/-ms,
//    --on-nan): the real thing, in monitor_fashion_mnist_test.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "monitor_run_fixtures.h"

using namespace monitor_run_test;

// ---------------------------------------------------------------------------------------------
// With the probe

TEST(MonitorRun, MetricsAndAStragglerReachTheLog) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/runs/one";  // made with its parents
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2"},
                            probe({"--steps", "60", "--slow-rank", "1", "--slow-ms", "30", "--slow-phase", "forward"})),
                 30);
  ASSERT_FALSE(r.timed_out);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(contains(r.err, "cohort run: run directory " + dir)) << r.err;
  EXPECT_TRUE(contains(r.err, "cohort run: dashboard at http://127.0.0.1:")) << r.err;
  EXPECT_TRUE(contains(r.err, "/metrics)")) << r.err;
  EXPECT_EQ(slurp(dir + "/dashboard.url").rfind("http://127.0.0.1:", 0), 0u);
  const auto log = read_log(dir);
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front()["kind"], "start");
  EXPECT_EQ(events(log, "rendezvous").size(), 1u);
  ASSERT_EQ(events(log, "round_started").size(), 1u);
  EXPECT_EQ(events(log, "round_started")[0]["world_size"], 2);
  EXPECT_GE(metrics(log, 0).size(), 55u);  // datagrams may be lost, but not here
  EXPECT_GE(metrics(log, 1).size(), 55u);
  const json m = metrics(log, 1).front();
  EXPECT_FALSE(m.contains("pid"));
  EXPECT_EQ(m["node"], 0);
  EXPECT_TRUE(m["t"].is_number());
  const auto slow = events(log, "anomaly", "straggler");
  ASSERT_EQ(slow.size(), 1u) << dump(log);
  EXPECT_EQ(slow[0]["rank"], 1);
  EXPECT_EQ(slow[0]["phase"], "forward");
  const auto fin = events(log, "finished");
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0]["state"], "succeeded");
  EXPECT_EQ(fin[0]["exit_code"], 0);
  EXPECT_EQ(log.back()["kind"], "finished");
}

TEST(MonitorRun, MetricsEndpointAndStateWhileRunning) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Child job(cohort_run(dir, {"--nproc-per-node", "2"}, probe({"--steps", "20", "--hold-ms", "4000"})));
  ASSERT_TRUE(wait_until([&] { return contains(slurp(dir + "/dashboard.url"), "\n"); }, 10));
  std::string url = slurp(dir + "/dashboard.url");
  url.pop_back();
  std::string text;
  ASSERT_TRUE(wait_until(
      [&] {
        text = http_get(url, "/metrics");
        return contains(text, "cohort_rank_step{job=\"run\",rank=\"1\"} 19");
      },
      10))
      << text;
  EXPECT_TRUE(contains(text, "200 OK")) << text.substr(0, 300);
  EXPECT_TRUE(contains(text, "text/plain; version=0.0.4")) << text.substr(0, 300);
  EXPECT_TRUE(contains(text, "# TYPE cohort_rank_steps_total counter"));
  EXPECT_TRUE(contains(text, "cohort_job_state{job=\"run\",state=\"running\"} 1"));
  EXPECT_TRUE(contains(text, "cohort_scalar{job=\"run\",rank=\"0\",name=\"lr\"} 0.05"));
  // Prometheus's own linter, where it is installed (Debian's prometheus package).
  if (std::filesystem::exists("/usr/bin/promtool")) {
    const std::string body = text.substr(text.find("\r\n\r\n") + 4);
    const std::string file = tmp.path() + "/metrics.txt";
    std::ofstream(file) << body;
    const Result lint = run({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file}, 30);
    EXPECT_EQ(lint.exit_code(), 0) << lint.out << lint.err;
  }
  const std::string state = http_get(url, "/api/state");
  const json snap = json::parse(state.substr(state.find("\r\n\r\n") + 4), nullptr, false);
  ASSERT_TRUE(snap.is_object()) << state.substr(0, 300);
  EXPECT_EQ(snap["job"]["world_size"], 2);
  EXPECT_EQ(snap["ranks"].size(), 2u);
  Result r = job.wait(30);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
}

TEST(MonitorRun, KilledRankIsAFailureEventWithItsReason) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2"},
                            probe({"--steps", "30", "--die-rank", "1", "--die-step", "5", "--hold-ms", "10000"})),
                 30);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  const auto log = read_log(dir);
  const auto failures = events(log, "failure");
  ASSERT_EQ(failures.size(), 1u) << dump(log);
  EXPECT_EQ(failures[0]["rank"], 1);
  EXPECT_EQ(failures[0]["node"], 0);
  EXPECT_EQ(failures[0]["reason"], "was killed by signal 9 (SIGKILL: Killed)");
  EXPECT_TRUE(contains(failures[0]["message"], "rank 1 (node 0, local rank 1")) << failures[0].dump();
  EXPECT_GE(metrics(log, 1).size(), 5u) << "its last metrics came before the failure";
  ASSERT_EQ(events(log, "finished").size(), 1u);
  EXPECT_EQ(events(log, "finished")[0]["state"], "failed");
  EXPECT_EQ(events(log, "finished")[0]["exit_code"], 1);
}

TEST(MonitorRun, RestartKeepsOneLogAcrossRounds) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2", "--max-restarts", "1"},
                            probe({"--steps", "10", "--die-rank", "0", "--die-step", "3", "--hold-ms", "300"})),
                 30);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  const auto log = read_log(dir);
  ASSERT_EQ(events(log, "failure").size(), 1u) << dump(log);
  EXPECT_EQ(events(log, "failure")[0]["rank"], 0);
  ASSERT_EQ(events(log, "restart").size(), 1u) << dump(log);
  EXPECT_EQ(events(log, "restart")[0]["restarts"], 1);
  const auto rounds = events(log, "round_started");
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[1]["round"], 1);
  EXPECT_EQ(rounds[1]["restart"], 1);
  int restarted = 0;
  for (const auto& m : metrics(log)) restarted += m.value("restart", 0) == 1;
  EXPECT_GE(restarted, 15);
  EXPECT_EQ(events(log, "finished")[0]["state"], "succeeded");
}

TEST(MonitorRun, NanInMetricsIsAnAnomalyOnceAndOnNanReachesTheWorkers) {
  TempDir tmp;
  {  // the worker says nothing: the hub notices the "nan" loss itself
    const std::string dir = tmp.path() + "/silent";
    Result r = run(cohort_run(dir, {"--nproc-per-node", "2"}, probe({"--steps", "12", "--nan-step", "6", "--nan-rank", "1"})),
                   30);
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    const auto nan = events(read_log(dir), "anomaly", "nan");
    ASSERT_EQ(nan.size(), 1u) << dump(read_log(dir));
    EXPECT_EQ(nan[0]["rank"], 1);
    EXPECT_EQ(nan[0]["step"], 6);
    EXPECT_EQ(nan[0]["what"], "loss");
  }
  {  // the worker reports it (as monitor() does, with its policy): one event, the worker's
    const std::string dir = tmp.path() + "/told";
    Result r = run(cohort_run(dir, {"--nproc-per-node", "2", "--on-nan", "skip"},
                              probe({"--steps", "12", "--nan-step", "6", "--nan-rank", "0", "--nan-event"})),
                   30);
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_TRUE(contains(r.out, "[0] on_nan=skip")) << r.out;
    EXPECT_TRUE(contains(r.out, "[1] on_nan=skip")) << r.out;
    const auto nan = events(read_log(dir), "anomaly", "nan");
    ASSERT_EQ(nan.size(), 1u) << dump(read_log(dir));
    EXPECT_EQ(nan[0]["rank"], 0);
    EXPECT_EQ(nan[0]["policy"], "skip");
  }
}

TEST(MonitorRun, StallIsReportedOnce) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/run";
  Result r = run(cohort_run(dir, {"--nproc-per-node", "2", "--stall-timeout", "1"}, probe({"--steps", "5", "--hold-ms", "3000"})),
                 30);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const auto log = read_log(dir);
  const auto stall = events(log, "anomaly", "stall");
  ASSERT_EQ(stall.size(), 1u) << dump(log);
  EXPECT_EQ(stall[0]["step"], 4);
  EXPECT_GE(stall[0]["idle_s"].get<double>(), 1.0);
}

TEST(MonitorRun, TwoNodesForwardTheirWorkersMetricsToTheLeader) {
  TempDir tmp;
  const int port = free_port_pair();
  auto node = [&](int rank) {
    return cohort_run(tmp.path() + "/node" + std::to_string(rank),
                      {"--nnodes", "2", "--node-rank", std::to_string(rank), "--master-addr", "127.0.0.1",
                       "--master-port", std::to_string(port), "--nproc-per-node", "1"},
                      probe({"--steps", "25", "--slow-rank", "1", "--slow-ms", "30"}));
  };
  Child n0(node(0)), n1(node(1));
  Result r0 = n0.wait(40), r1 = n1.wait(40);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  ASSERT_EQ(r0.exit_code(), 0) << r0.err;
  ASSERT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/node1")) << "only the leader keeps a run directory";
  EXPECT_FALSE(contains(r1.err, "dashboard at")) << r1.err;
  const auto log = read_log(tmp.path() + "/node0");
  const auto remote = metrics(log, 1);
  ASSERT_GE(remote.size(), 20u) << dump(log);
  EXPECT_EQ(remote[0]["node"], 1);
  EXPECT_EQ(metrics(log, 0).at(0)["node"], 0);
  const auto slow = events(log, "anomaly", "straggler");
  ASSERT_EQ(slow.size(), 1u) << dump(log);
  EXPECT_EQ(slow[0]["rank"], 1);
  EXPECT_EQ(slow[0]["node"], 1);
}

TEST(MonitorRun, ElasticMembersForwardToTheRendezvousHost) {
  TempDir tmp;
  const int port = free_port();
  auto agent = [&](const std::string& role) {
    return cohort_run(tmp.path() + "/" + role,
                      {"--nnodes", "2:2", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "mon",
                       "--rdzv-role", role, "--nproc-per-node", "1", "--rdzv-timeout", "30"},
                      probe({"--steps", "25"}));
  };
  Child host(agent("host"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Child member(agent("member"));
  Result rh = host.wait(60), rm = member.wait(60);
  ASSERT_FALSE(rh.timed_out || rm.timed_out);
  ASSERT_EQ(rh.exit_code(), 0) << rh.err;
  ASSERT_EQ(rm.exit_code(), 0) << rm.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/member"));
  const auto log = read_log(tmp.path() + "/host");
  EXPECT_EQ(events(log, "start").at(0)["job"], "mon");
  EXPECT_GE(metrics(log, 1).size(), 20u) << dump(log);
  EXPECT_EQ(metrics(log, 1).at(0)["node"], 1);
  EXPECT_EQ(events(log, "finished").at(0)["state"], "succeeded");
}

TEST(MonitorRun, DashboardFlags) {
  TempDir tmp;
  {  // --no-dashboard: the log, no server
    const std::string dir = tmp.path() + "/quiet";
    Result r = run(cohort_run(dir, {"--nproc-per-node", "1", "--no-dashboard"}, probe({"--steps", "3"})), 30);
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_FALSE(contains(r.err, "dashboard at")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/dashboard.url"));
    EXPECT_EQ(metrics(read_log(dir)).size(), 3u);
  }
  {  // another address without a token: refused before anything starts, one line, exit 2
    const std::string dir = tmp.path() + "/open";
    Result r = run(cohort_run(dir, {"--nproc-per-node", "1", "--dashboard-host", "0.0.0.0"}, probe({"--steps", "3"})), 30);
    EXPECT_EQ(r.exit_code(), 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, "--dashboard-token")) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_FALSE(std::filesystem::exists(dir));
  }
  {  // ... with the token from the environment it starts, and the URL carries the token
    const std::string dir = tmp.path() + "/token";
    Result r = run(cohort_run(dir, {"--nproc-per-node", "1", "--dashboard-host", "0.0.0.0"}, probe({"--steps", "3"})),
                   30, {"COHORT_DASHBOARD_TOKEN=s3cret"});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_TRUE(contains(slurp(dir + "/dashboard.url"), "token=s3cret"));
  }
  {  // bad values
    Result r = run({COHORT_BIN, "run", "--on-nan", "maybe", "--", METRICS_PROBE_BIN}, 10);
    EXPECT_EQ(r.exit_code(), 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    r = run({COHORT_BIN, "run", "--straggler-factor", "0.5", "--", METRICS_PROBE_BIN}, 10);
    EXPECT_EQ(r.exit_code(), 2) << r.err;
    EXPECT_TRUE(contains(r.err, "--straggler-factor")) << r.err;
  }
}
