// Elastic membership across "machines": three network namespaces (10.78.0.1-3) on a bridge in a
// fourth, one `cohort run --nnodes 2:3` agent in each, the Fashion-MNIST example (MLP, a subset,
// checkpoints every few steps in a directory every namespace sees). One node's link is cut, or its
// agent killed: the other two go on at the smaller world size and finish; in the first test the
// node comes back and the job grows again.
//
// Every sample of every epoch must be consumed exactly once across the changes. The example's
// --log-samples writes, per rank and step, the round, the step and the sample indices, and a line
// with the step each start resumed from. A round that resumes from step S rolls back every later
// step of the rounds before it; the test replays that and checks the surviving history.
//
// Needs root and iproute2 (`ip netns`, bridge); skipped with the reason otherwise. Only addresses
// inside the test's own namespaces are used; the namespaces are removed at the end.
#include <gtest/gtest.h>

#include <glob.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

constexpr int kTrainLimit = 2880;  // 24·120: no padding at 2 or 3 ranks, at any point (batch 24)
constexpr int kEpochs = 2;

// Nodes 0..n-1 in namespaces of their own, each with a veth to a bridge in a "switch" namespace.
class NamespaceStar {
 public:
  NamespaceStar(const std::string& ip, int n) : ip_(ip), id_(std::to_string(getpid())) {
    sw_ = "ce" + id_ + "sw";
    ok_ = sh(ip_ + " netns add " + sw_) == 0 && sh(ip_ + " -n " + sw_ + " link add br0 type bridge") == 0 &&
          sh(ip_ + " -n " + sw_ + " link set br0 up") == 0;
    for (int i = 0; ok_ && i < n; ++i) {
      const std::string ns = name(i), veth = "ce" + id_ + "v" + std::to_string(i), port = "ce" + id_ + "p" + std::to_string(i);
      nodes_.push_back(ns);
      ok_ = sh(ip_ + " netns add " + ns) == 0 && sh(ip_ + " link add " + veth + " type veth peer name " + port) == 0 &&
            sh(ip_ + " link set " + veth + " netns " + ns) == 0 && sh(ip_ + " link set " + port + " netns " + sw_) == 0 &&
            sh(ip_ + " -n " + sw_ + " link set " + port + " master br0") == 0 &&
            sh(ip_ + " -n " + sw_ + " link set " + port + " up") == 0 &&
            sh(ip_ + " -n " + ns + " addr add " + address(i) + "/24 dev " + veth) == 0 &&
            sh(ip_ + " -n " + ns + " link set " + veth + " up") == 0 &&
            sh(ip_ + " -n " + ns + " link set lo up") == 0;
      if (!ok_) sh(ip_ + " link del " + veth);  // in case it was created but not moved
    }
  }
  ~NamespaceStar() {
    for (const auto& ns : nodes_) sh(ip_ + " netns del " + ns);  // takes the veth pair with it
    sh(ip_ + " netns del " + sw_);
  }
  bool ok() const { return ok_; }
  static std::string address(int i) { return "10.78.0." + std::to_string(i + 1); }
  std::vector<std::string> exec_in(int i, std::vector<std::string> cmd) const {
    cmd.insert(cmd.begin(), {ip_, "netns", "exec", name(i)});
    return cmd;
  }
  /// Cuts (or restores) node i's only link.
  bool set_link(int i, bool up) {
    return sh(ip_ + " -n " + name(i) + " link set ce" + id_ + "v" + std::to_string(i) + (up ? " up" : " down")) == 0;
  }

 private:
  std::string name(int i) const { return "ce" + id_ + "n" + std::to_string(i); }
  std::string ip_, id_, sw_;
  std::vector<std::string> nodes_;
  bool ok_ = false;
};

// What the ranks logged (sample_log.h), by round.
struct SampleLogs {
  struct Start {
    int world = 0;
    int64_t resumed = -1;
  };
  struct Step {
    int world = 0;
    int epoch = 0;
    std::map<int, std::vector<int>> samples;  // by rank
  };
  std::map<int, Start> starts;                   // by round
  std::map<int, std::map<int64_t, Step>> steps;  // by round, then step
  std::map<int, int64_t> done;                   // by round: the newest step a rank counted done
  std::string problems;                          // ranks that disagree about a round's start

  static SampleLogs read(const std::string& prefix) {
    SampleLogs logs;
    glob_t g{};
    if (glob((prefix + ".rank*").c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        std::ifstream f(g.gl_pathv[i]);
        std::string line;
        while (std::getline(f, line)) {
          auto j = nlohmann::json::parse(line, nullptr, false);
          if (j.is_discarded() || !j.is_object()) continue;  // a worker killed mid-write
          const int round = j.value("round", -1), world = j.value("world", 0), rank = j.value("rank", -1);
          if (j.contains("resumed_step")) {
            Start s{world, j.value("resumed_step", int64_t{-1})};
            auto [it, fresh] = logs.starts.emplace(round, s);
            if (!fresh && (it->second.world != s.world || it->second.resumed != s.resumed)) {
              logs.problems += "round " + std::to_string(round) + ": ranks disagree about the start\n";
            }
          } else if (j.contains("step")) {
            Step& st = logs.steps[round][j.value("step", int64_t{0})];
            st.world = world;
            st.epoch = j.value("epoch", 0);
            st.samples[rank] = j.value("samples", std::vector<int>{});
          } else if (j.contains("done")) {
            int64_t& newest = logs.done[round];
            newest = std::max(newest, j.value("done", int64_t{0}));
          }
        }
      }
    }
    globfree(&g);
    return logs;
  }

  int64_t last_step(int round) const {
    auto it = steps.find(round);
    return it == steps.end() || it->second.empty() ? 0 : it->second.rbegin()->first;
  }
};

// What the replay of the logs found.
struct Replay {
  std::vector<int> round_worlds;   // the world size of every round that started, in order
  std::vector<int64_t> went_back;  // per round after the first: the newest step done before it less the step it resumed from
  std::set<int> surviving_worlds;  // the world sizes of the steps that survived
  std::string problems;            // empty: every epoch's samples trained on exactly once
};

// Replays the rounds (each rolls back the steps after the checkpoint it resumed from) and checks
// that the surviving steps are 1..K, each with every rank of its round, and cover every one of
// the `epochs` epochs' `n` samples exactly once.
Replay replay(const SampleLogs& logs, int n, int epochs) {
  Replay out;
  std::ostringstream problems;
  problems << logs.problems;
  std::map<int64_t, SampleLogs::Step> history;
  int64_t newest = 0;  // the newest step any earlier round counted done (its maybe_save returned)
  for (const auto& [round, start] : logs.starts) {
    out.round_worlds.push_back(start.world);
    if (round > 0) out.went_back.push_back(newest - start.resumed);
    if (auto it = logs.done.find(round); it != logs.done.end()) newest = std::max(newest, it->second);
    history.erase(history.upper_bound(start.resumed), history.end());  // rolled back
    if (static_cast<int64_t>(history.size()) != start.resumed) {
      problems << "round " << round << " resumed from step " << start.resumed << " but only " << history.size()
               << " steps came before it\n";
    }
    auto it = logs.steps.find(round);
    if (it == logs.steps.end()) continue;
    for (const auto& [step, st] : it->second) history[step] = st;
  }
  std::map<int, std::vector<int>> seen;  // by epoch: how often each sample was trained on
  int64_t expect = 1;
  for (const auto& [step, st] : history) {
    if (step != expect) problems << "step " << expect << " is missing from the surviving history\n";
    expect = step + 1;
    if (static_cast<int>(st.samples.size()) != st.world) problems << "step " << step << " lacks ranks\n";
    out.surviving_worlds.insert(st.world);
    auto& count = seen[st.epoch];
    count.resize(static_cast<size_t>(n), 0);
    for (const auto& [rank, samples] : st.samples) {
      for (int s : samples) {
        if (s >= 0 && s < n) ++count[static_cast<size_t>(s)];
      }
    }
  }
  if (static_cast<int>(seen.size()) != epochs) problems << seen.size() << " epochs trained, not " << epochs << "\n";
  for (const auto& [epoch, count] : seen) {
    int missing = 0, twice = 0, example = -1;
    for (int s = 0; s < n; ++s) {
      missing += count[static_cast<size_t>(s)] == 0;
      twice += count[static_cast<size_t>(s)] > 1;
      if (count[static_cast<size_t>(s)] != 1 && example < 0) example = s;
    }
    if (missing + twice > 0) {
      problems << "epoch " << epoch << ": " << missing << " samples never trained on, " << twice
               << " trained on more than once (e.g. sample " << example << ")\n";
    }
  }
  out.problems = problems.str();
  return out;
}

// Polls the logs until `ready` says so (or the bound passes); returns whether it did.
template <typename F>
bool wait_for_logs(const std::string& prefix, double timeout_s, F ready) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (clock::now() < deadline) {
    if (ready(SampleLogs::read(prefix))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// The result of LauncherElasticNetns::kill_and_replace_node_2.
struct NodeLossRun {
  Result r0, r1, r2b;
  Replay replayed;
};

class LauncherElasticNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    ip_ = find_ip();
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (ip_.empty()) GTEST_SKIP() << "needs iproute2 (ip netns); scripts/setup.sh installs it";
    star_ = std::make_unique<NamespaceStar>(ip_, 3);
    ASSERT_TRUE(star_->ok()) << "could not create the namespaces, veth pairs and bridge";
    prefix_ = dir_.path() + "/samples";
  }

  // Node i's agent: node 0 hosts the rendezvous at its own address. `snapshots`: the example
  // also snapshots every step (each node keeps a copy in its own memory).
  // `snapshots`: in-memory snapshots every step, and disk checkpoints only at the end (restore
  // takes the disk's at the same step, by design, and these tests are about the snapshots).
  NodeLossRun kill_and_replace_node_2(const std::vector<std::string>& extra);

  std::vector<std::string> node(int i, bool snapshots = false, const std::vector<std::string>& extra = {}) const {
    auto cmd = star_->exec_in(
        i, {COHORT_BIN, "run", "--nnodes", "2:3", "--rdzv-endpoint", NamespaceStar::address(0) + ":29400",
            "--rdzv-id", "netns", "--rdzv-role", i == 0 ? "host" : "member", "--rdzv-settle", "20",
            "--rdzv-timeout", "60", "--node-timeout", "2", "--stop-timeout", "2", "--nproc-per-node", "1",
            "--threads-per-proc", "1", "--", FASHION_MNIST_BIN, "--model", "mlp", "--batch-size", "24",
            "--train-limit", std::to_string(kTrainLimit), "--epochs", std::to_string(kEpochs), "--no-eval",
            "--threads", "1", "--log-every", "0", "--ckpt-dir", dir_.path() + "/ckpt", "--ckpt-every", snapshots ? "100000" : "4",
            "--log-samples", prefix_});
    if (snapshots) cmd.insert(cmd.end(), {"--snapshot-every", "1"});
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    return cmd;
  }

  // A committed checkpoint (its manifest written) saved by `world` ranks exists.
  bool checkpoint_of_world(int world) const {
    bool found = false;
    glob_t g{};
    if (glob((dir_.path() + "/ckpt/step-*/manifest.json").c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc && !found; ++i) {
        std::ifstream f(g.gl_pathv[i]);
        auto j = nlohmann::json::parse(f, nullptr, false);
        found = j.is_object() && j.value("world_size", 0) == world;
      }
    }
    globfree(&g);
    return found;
  }

  // For a failure's message: the nodes' agents stopped (SIGKILL after 1 s) and the tail of what
  // each wrote to stderr, which nothing reads while a test waits on the sample logs.
  static std::string agents_said(std::initializer_list<Child*> nodes) {
    std::string out;
    int i = 0;
    for (Child* c : nodes) {
      const Result r = c->wait(1);
      out += "--- node " + std::to_string(i++) + " (" + std::to_string(r.err.size()) + " bytes on stderr):\n" +
             r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0) + "\n";
    }
    return out;
  }

  std::string ip_;
  std::unique_ptr<NamespaceStar> star_;
  TempDir dir_;
  std::string prefix_;
};


TEST_F(LauncherElasticNetns, LinkCutShrinksTheJobAndTheReturningNodeGrowsIt) {
  Child n0(node(0)), n1(node(1)), n2(node(2));
  // Round 0 on three nodes has made progress (and checkpoints) ...
  ASSERT_TRUE(wait_for_logs(prefix_, 120, [](const SampleLogs& l) { return l.last_step(0) >= 10; }))
      << "round 0 did not get to step 10\n" << agents_said({&n0, &n1, &n2});
  ASSERT_TRUE(star_->set_link(2, false));  // ... when node 2's network goes away.
  // Node 2 hears nothing from the host and stops; the other two form round 1 at world size 2.
  Result r2 = n2.wait(60);
  ASSERT_FALSE(r2.timed_out) << "the cut-off node hung";
  EXPECT_EQ(r2.exit_code(), 1) << r2.err;
  EXPECT_NE(r2.err.find("lost contact with the rendezvous host at 10.78.0.1:29400"), std::string::npos) << r2.err;
  // Until the two have committed a checkpoint of their own: that progress must survive the growth.
  ASSERT_TRUE(wait_for_logs(prefix_, 120, [&](const SampleLogs&) { return checkpoint_of_world(2); }))
      << "the two remaining nodes did not continue";
  // The node comes back (a new agent, as a user would start it) and the job grows again.
  ASSERT_TRUE(star_->set_link(2, true));
  Child n2b(node(2));
  Result r0 = n0.wait(240), r1 = n1.wait(240), r2b = n2b.wait(240);
  ASSERT_FALSE(r0.timed_out || r1.timed_out || r2b.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_EQ(r2b.exit_code(), 0) << r2b.err;
  EXPECT_NE(r0.err.find("was lost (no message for 2 s)"), std::string::npos) << r0.err;
  EXPECT_NE(r1.err.find(") joined; round "), std::string::npos) << r1.err;
  EXPECT_NE(r2b.out.find("\"world_size\":3"), std::string::npos) << r2b.out;

  const Replay replayed = replay(SampleLogs::read(prefix_), kTrainLimit, kEpochs);
  EXPECT_EQ(replayed.problems, "");
  ASSERT_GE(replayed.round_worlds.size(), 3u);
  EXPECT_EQ(replayed.round_worlds.front(), 3);
  EXPECT_EQ(replayed.round_worlds.back(), 3) << "the job did not grow back to three nodes";
  EXPECT_EQ(replayed.surviving_worlds, (std::set<int>{2, 3})) << "steps of both world sizes must survive";
}

TEST_F(LauncherElasticNetns, KilledNodeLeavesTwoThatFinish) {
  Child n0(node(0)), n1(node(1)), n2(node(2));
  ASSERT_TRUE(wait_for_logs(prefix_, 120, [](const SampleLogs& l) { return l.last_step(0) >= 10; }))
      << "round 0 did not get to step 10\n" << agents_said({&n0, &n1, &n2});
  kill(n2.pid(), SIGKILL);  // node 2's agent (ip netns exec execs it); its worker dies with it
  Result r0 = n0.wait(240), r1 = n1.wait(240);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  for (const Result* r : {&r0, &r1}) {
    EXPECT_NE(r->err.find("was lost (its connection closed); round "), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("runs on 2 nodes with 2 workers (a membership change, not a restart)"), std::string::npos)
        << r->err;
  }
  const Replay replayed = replay(SampleLogs::read(prefix_), kTrainLimit, kEpochs);
  EXPECT_EQ(replayed.problems, "");
  ASSERT_GE(replayed.round_worlds.size(), 2u);
  EXPECT_EQ(replayed.round_worlds.front(), 3);
  EXPECT_EQ(replayed.round_worlds.back(), 2);
  EXPECT_EQ(replayed.surviving_worlds, (std::set<int>{2, 3}));
}

// In-memory snapshots on every node (issue 19): node 2's agent is killed (its machine's memory
// goes with it) and a new one joins later with empty memory. The two survivors resume from their
// own copies, the grown job from the newest snapshot, which the new node receives from the others;
// no round goes back more than one step, and every sample is still trained on exactly once.
// Kills node 2's agent (its machine's memory goes with it), lets the two others go on, starts a
// new node 2; returns the three nodes' results and the replay of every rank's samples.
NodeLossRun LauncherElasticNetns::kill_and_replace_node_2(const std::vector<std::string>& extra) {
  NodeLossRun out;
  Child n0(node(0, true, extra)), n1(node(1, true, extra)), n2(node(2, true, extra));
  EXPECT_TRUE(wait_for_logs(prefix_, 120, [](const SampleLogs& l) { return l.last_step(0) >= 10; }))
      << "round 0 did not get to step 10";
  kill(n2.pid(), SIGKILL);
  EXPECT_TRUE(wait_for_logs(prefix_, 120, [](const SampleLogs& l) { return l.last_step(1) >= l.last_step(0) + 5; }))
      << "the two remaining nodes did not continue";
  Child n2b(node(2, true, extra));
  out.r0 = n0.wait(240), out.r1 = n1.wait(240), out.r2b = n2b.wait(240);
  out.replayed = replay(SampleLogs::read(prefix_), kTrainLimit, kEpochs);
  return out;
}

void expect_every_round_resumed_from_memory(const NodeLossRun& run) {
  ASSERT_FALSE(run.r0.timed_out || run.r1.timed_out || run.r2b.timed_out);
  EXPECT_EQ(run.r0.exit_code(), 0) << run.r0.err;
  EXPECT_EQ(run.r1.exit_code(), 0) << run.r1.err;
  EXPECT_EQ(run.r2b.exit_code(), 0) << run.r2b.err;
  const Replay& replayed = run.replayed;
  EXPECT_EQ(replayed.problems, "");
  ASSERT_GE(replayed.round_worlds.size(), 3u);
  EXPECT_EQ(replayed.round_worlds.back(), 3) << "the job did not grow back to three nodes";
  for (size_t i = 0; i < replayed.went_back.size(); ++i)
    EXPECT_LE(replayed.went_back[i], 1) << "round " << i + 1 << " went back " << replayed.went_back[i] << " steps";
  // Every round after the first resumed from a snapshot in memory (rank 0 prints where from).
  size_t from_memory = 0;
  for (size_t at = run.r0.out.find("resumed from /dev/shm/cohort-snapshots-"); at != std::string::npos;
       at = run.r0.out.find("resumed from /dev/shm/cohort-snapshots-", at + 1))
    ++from_memory;
  EXPECT_EQ(from_memory, replayed.round_worlds.size() - 1) << run.r0.out;
}

// In-memory snapshots on every node (issue 19): node 2's agent is killed (its machine's memory
// goes with it) and a new one joins later with empty memory. The two survivors resume from their
// own copies, the grown job from the newest snapshot, which the new node receives from the others;
// no round goes back more than one step, and every sample is still trained on exactly once.
TEST_F(LauncherElasticNetns, SnapshotsLoseAtMostOneStepWhenANodeIsKilledAndReplaced) {
  expect_every_round_resumed_from_memory(kill_and_replace_node_2({}));
}

// The same with state that each rank holds alone (PowerSGD's errors and Qs): it is kept on a buddy
// node too (buddy_copies.h), so the shrunk job and the grown one still resume from memory.
TEST_F(LauncherElasticNetns, SnapshotsOfPerRankStateSurviveANodeKilledAndReplaced) {
  expect_every_round_resumed_from_memory(kill_and_replace_node_2({"--comm-hook", "powersgd"}));
}

// The replay itself, on made-up logs (no root needed): it must notice a sample trained on twice
// and one never trained on, and accept a correct history with a rollback in it.
TEST(LauncherElasticSampleLog, ReplayCountsOnlyTheSurvivingSteps) {
  TempDir dir;
  const std::string prefix = dir.path() + "/s";
  auto write = [&](int rank, const std::vector<std::string>& lines) {
    std::ofstream f(prefix + ".rank" + std::to_string(rank), std::ios::app);
    for (const auto& l : lines) f << l << "\n";
  };
  // 8 samples, one epoch. Round 0 (2 ranks) does steps 1-3 (rank 0 counts 3 done, rank 1 dies
  // before), checkpoint at 2, then dies; round 1 (1 rank) resumes from step 2 — one step back —
  // and does the remaining 4 samples in steps 3 and 4.
  write(0, {R"({"round":0,"world":2,"rank":0,"resumed_step":0})", R"({"round":0,"world":2,"rank":0,"step":1,"epoch":0,"samples":[0]})",
            R"({"round":0,"world":2,"rank":0,"done":1})",
            R"({"round":0,"world":2,"rank":0,"step":2,"epoch":0,"samples":[2]})", R"({"round":0,"world":2,"rank":0,"done":2})",
            R"({"round":0,"world":2,"rank":0,"step":3,"epoch":0,"samples":[4]})", R"({"round":0,"world":2,"rank":0,"done":3})",
            R"({"round":1,"world":1,"rank":0,"resumed_step":2})", R"({"round":1,"world":1,"rank":0,"step":3,"epoch":0,"samples":[4,5]})",
            R"({"round":1,"world":1,"rank":0,"step":4,"epoch":0,"samples":[6,7]})"});
  write(1, {R"({"round":0,"world":2,"rank":1,"resumed_step":0})", R"({"round":0,"world":2,"rank":1,"step":1,"epoch":0,"samples":[1]})",
            R"({"round":0,"world":2,"rank":1,"step":2,"epoch":0,"samples":[3]})", R"({"round":0,"world":2,"rank":1,"step":3,"epoch":0,"sam)"});
  Replay good = replay(SampleLogs::read(prefix), 8, 1);
  EXPECT_EQ(good.problems, "");
  EXPECT_EQ(good.round_worlds, (std::vector<int>{2, 1}));
  EXPECT_EQ(good.went_back, (std::vector<int64_t>{1}));

  write(0, {R"({"round":2,"world":1,"rank":0,"resumed_step":3})", R"({"round":2,"world":1,"rank":0,"step":4,"epoch":0,"samples":[5,6]})"});
  Replay bad = replay(SampleLogs::read(prefix), 8, 1);  // 5 twice (steps 3 and 4), 7 never
  EXPECT_NE(bad.problems.find("1 samples never trained on, 1 trained on more than once (e.g. sample 5)"),
            std::string::npos)
      << bad.problems;
}

}  // namespace
