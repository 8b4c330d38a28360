// The pieces of hang detection, one at a time, in one process: the flight recorder's ring and its
// dump, the worker's agent link (agent gone, agent slow, a dump request), the agent's worker link
// talking to it, and the hang rule with times passed in. The whole thing with real processes and
// signals is tests/integration/hang_test.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "launcher/watch/hang_detector.h"
#include "launcher/workers/worker_link.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/flight_recorder.h"
#include "runtime/agent_link/rejoin_watch.h"

namespace {

using cohort::detail::AgentLink;
using cohort::detail::AgentLinkOptions;
using cohort::detail::FlightOp;
using cohort::detail::FlightRecorder;
using cohort::detail::FlightState;
using cohort::launcher::HangDetector;
using cohort::launcher::Heartbeat;
using cohort::launcher::WorkerLink;
using cohort::launcher::WorkerMessage;
using namespace std::chrono_literals;

FlightOp bucket(int32_t k) { return FlightOp{"allreduce", "ddp bucket", k, "shm", "Float", 100, 400}; }

std::string temp_dir() {
  std::string templ = (std::filesystem::temp_directory_path() / "cohort_hang_XXXXXX").string();
  return mkdtemp(templ.data());
}

// A datagram socket bound at `path`, standing in for the agent.
int bound_socket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << path << ": " << std::strerror(errno);
  return fd;
}

// Waits up to `timeout` for a datagram on fd; returns it (empty: none) and the sender's path.
std::string receive(int fd, std::string* sender, std::chrono::milliseconds timeout = 5000ms) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[65536];
  sockaddr_un from{};
  socklen_t len = sizeof(from);
  ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
  if (n <= 0) return "";
  if (sender) *sender = from.sun_path;
  return std::string(buf, static_cast<size_t>(n));
}

AgentLinkOptions link_options(const std::string& agent_socket, int rank = 1) {
  AgentLinkOptions o;
  o.agent_socket = agent_socket;
  o.heartbeat_ms = 50;
  o.identity.rank = rank;
  o.identity.world_size = 2;
  o.identity.pid = getpid();
  return o;
}

// --- the flight recorder's ring ---

TEST(HangFlightRecorder, KeepsTheLastEntriesOldestFirstAcrossTheWrapAround) {
  FlightRecorder r(4);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(r.record(bucket(k), /*step=*/k), static_cast<uint64_t>(k + 1));
  auto s = r.snapshot();
  ASSERT_EQ(s.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].seq, 7 + i);
    EXPECT_EQ(s[i].op.index, static_cast<int32_t>(6 + i));
    EXPECT_EQ(s[i].step, static_cast<int64_t>(6 + i));
    EXPECT_STREQ(s[i].op.what, "ddp bucket");
  }
  EXPECT_EQ(r.recorded(), 10u);
}

TEST(HangFlightRecorder, StatesMoveOnAndAnOverwrittenEntryIsLeftAlone) {
  FlightRecorder r(2);
  const uint64_t a = r.record(bucket(0), 0);
  r.set_state(a, FlightState::started);
  EXPECT_EQ(r.snapshot()[0].state, FlightState::started);
  EXPECT_GT(r.snapshot()[0].started_us, 0);
  EXPECT_EQ(r.oldest_unfinished().seq, a);
  r.set_state(a, FlightState::completed);
  EXPECT_EQ(r.completed(), 1u);
  EXPECT_EQ(r.oldest_unfinished().seq, 0u);
  r.set_state(a, FlightState::failed);  // final states stay final
  EXPECT_EQ(r.snapshot()[0].state, FlightState::completed);
  EXPECT_EQ(r.completed(), 1u);

  const uint64_t b = r.record(bucket(1), 0);
  const uint64_t c = r.record(bucket(2), 0);  // overwrites a's slot
  r.set_state(a, FlightState::failed);       // a is gone: must not touch c
  r.set_state(0, FlightState::failed);       // 0 means "not recorded"
  auto s = r.snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].seq, b);
  EXPECT_EQ(s[1].seq, c);
  EXPECT_EQ(s[1].state, FlightState::enqueued);
  r.set_state(c, FlightState::failed);
  EXPECT_EQ(r.snapshot()[1].state, FlightState::failed);
  EXPECT_GT(r.snapshot()[1].ended_us, 0);
  EXPECT_EQ(r.oldest_unfinished().seq, b);
  EXPECT_EQ(r.completed(), 1u);
}

TEST(HangFlightRecorder, TheDumpNamesTheCollectiveThisRankWaitsIn) {
  FlightRecorder r(8);
  for (int k = 0; k < 3; ++k) r.set_state(r.record(bucket(k), 5), FlightState::completed);
  const uint64_t stuck = r.record(bucket(0), 6);
  r.set_state(stuck, FlightState::started);
  r.record(bucket(1), 6);  // queued behind it
  cohort::detail::FlightDumpInfo info;
  info.rank = 1;
  info.world_size = 2;
  info.step = 6;
  info.reason = "rank 1 made no progress";
  const std::string text = cohort::detail::flight_record_json(info, r.snapshot(), cohort::detail::wall_clock_us());
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], "cohort-flight-record");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["step"], 6);
  EXPECT_EQ(j["waiting_in_seq"], 4);
  EXPECT_EQ(j["last_completed_seq"], 3);
  EXPECT_NE(j["waiting_in"].get<std::string>().find("#4 allreduce of ddp bucket 0 (100 x Float, 400 bytes, shm): started"),
            std::string::npos)
      << text;
  ASSERT_EQ(j["entries"].size(), 5u);
  EXPECT_EQ(j["entries"][3]["state"], "started");
  EXPECT_EQ(j["entries"][4]["state"], "enqueued");
  EXPECT_TRUE(j["entries"][4]["started_us"].is_null());
  // Readable: one entry a line.
  std::istringstream lines(text);
  int entry_lines = 0;
  for (std::string line; std::getline(lines, line);) entry_lines += line.rfind("    {\"age_s\"", 0) == 0;
  EXPECT_EQ(entry_lines, 5) << text;
}

// --- the worker's end of the link ---

TEST(HangAgentLink, AnAgentThatIsGoneNeverBlocksOrFailsTheWorker) {
  const std::string dir = temp_dir();
  AgentLink link(link_options(dir + "/agent.sock"));  // nobody listens there
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) EXPECT_FALSE(link.send("{\"type\":\"x\"}"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // a no-hang bound, not a timing claim
  std::this_thread::sleep_for(200ms);                        // the heartbeat thread keeps going
  EXPECT_EQ(link.heartbeats_sent(), 0u);
  std::filesystem::remove_all(dir);
}

TEST(HangAgentLink, AnAgentThatDoesNotReadDropsMessagesInsteadOfBlocking) {
  const std::string dir = temp_dir();
  const int agent = bound_socket(dir + "/agent.sock");  // never read: its queue fills up
  AgentLink link(link_options(dir + "/agent.sock"));
  int sent = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100000; ++i) sent += link.send(std::string(1000, 'x'));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, 100000);  // some were dropped: the queue was full and nobody waited
  close(agent);
  std::filesystem::remove_all(dir);
}

TEST(HangAgentLink, SendsHeartbeatsAndWritesItsFlightRecordWhenTheAgentAsks) {
  const std::string dir = temp_dir();
  const int agent = bound_socket(dir + "/agent.sock");
  AgentLink link(link_options(dir + "/agent.sock", /*rank=*/3));
  EXPECT_EQ(link.own_socket(), dir + "/w" + std::to_string(getpid()) + ".sock");
  std::string sender;
  const auto beat = nlohmann::json::parse(receive(agent, &sender));
  EXPECT_EQ(beat["type"], "heartbeat");
  EXPECT_EQ(beat["rank"], 3);
  EXPECT_EQ(beat["pid"], getpid());
  EXPECT_TRUE(beat.contains("collectives"));
  EXPECT_EQ(sender, link.own_socket());

  // A request from someone else is ignored; the agent's is served.
  const std::string path = dir + "/flight-round0-rank3.json";
  const std::string request = nlohmann::json{{"type", "dump"}, {"path", path}, {"reason", "test"}}.dump();
  const int stranger = bound_socket(dir + "/stranger.sock");
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::strcpy(to.sun_path, link.own_socket().c_str());
  ASSERT_EQ(sendto(stranger, request.data(), request.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            static_cast<ssize_t>(request.size()));
  ASSERT_EQ(sendto(agent, request.data(), request.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            static_cast<ssize_t>(request.size()));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (link.dumps_written() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(link.dumps_written(), 1u);
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const auto dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["rank"], 3);
  EXPECT_EQ(dump["reason"], "test");
  close(stranger);
  close(agent);
  std::filesystem::remove_all(dir);
}

// --- the agent's end, talking to the worker's ---

TEST(HangWorkerLink, ReceivesHeartbeatsAndReachesTheWorkerBack) {
  std::string dir;
  {
    WorkerLink agent;
    dir = agent.dir();
    struct stat st {};
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);  // private: only this user can reach the sockets
    AgentLink worker(link_options(agent.socket_path(), /*rank=*/0));
    std::vector<WorkerMessage> got;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (got.empty() && std::chrono::steady_clock::now() < deadline) {
      got = agent.receive();
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got[0].type, "heartbeat");
    EXPECT_EQ(got[0].pid, getpid());
    EXPECT_EQ(got[0].rank, 0);
    EXPECT_TRUE(agent.knows(getpid()));
    EXPECT_FALSE(agent.knows(getpid() + 1));
    const std::string path = dir + "/flight-round0-rank0.json";
    ASSERT_TRUE(agent.request(getpid(), nlohmann::json{{"type", "dump"}, {"path", path}}.dump()));
    bool dumped = false;
    while (!dumped && std::chrono::steady_clock::now() < deadline) {
      for (const auto& m : agent.receive()) dumped = dumped || (m.type == "dumped" && m.path == path);
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(dumped);
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  // The agent removed its sockets and kept the directory for the flight record in it.
  EXPECT_TRUE(std::filesystem::exists(dir + "/flight-round0-rank0.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/agent.sock"));
  std::filesystem::remove_all(dir);
}

// Hostile datagrams (issue 22): wrong kinds and a pid that is not the sender's are dropped, and
// the agent goes on; a well-formed one from the same socket still arrives.
TEST(HangWorkerLink, DropsMistypedAndSpoofedDatagrams) {
  WorkerLink agent;
  const int sender = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sender, 0);
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::strcpy(to.sun_path, agent.socket_path().c_str());
  const std::string me = std::to_string(getpid());
  const std::string other = std::to_string(getpid() == 1 ? 2 : 1);  // init: alive, never a worker
  for (const std::string& d :
       {std::string(R"({"type":"heartbeat","pid":)") + me + R"(,"step":"x"})",
        std::string(R"({"type":7,"pid":)") + me + "}", std::string(R"({"type":"heartbeat","pid":"x"})"),
        std::string(R"({"type":"heartbeat","pid":)") + me + R"(,"rank":1e300})",
        std::string(R"({"type":"event","pid":)") + other + R"(,"kind":"spoofed"})", std::string("[1,2]"),
        std::string("\xff\xfe"), std::string(R"({"type":"heartbeat","pid":)") + me + R"(,"step":42})"}) {
    ASSERT_EQ(sendto(sender, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(d.size()));
  }
  std::vector<WorkerMessage> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.empty() && std::chrono::steady_clock::now() < deadline) {
    got = agent.receive();
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(got.size(), 1u);  // only the last, well-formed heartbeat
  EXPECT_EQ(got[0].pid, getpid());
  EXPECT_EQ(got[0].heartbeat.step, 42);
  close(sender);
}

TEST(HangWorkerLink, RemovesTheRunDirectoriesOfAgentsThatDiedButNotOfLiveOnes) {
  const std::string base = temp_dir();
  const char* old_xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_RUNTIME_DIR", base.c_str(), 1);
  auto fake_run_dir = [&](const std::string& name) {
    std::filesystem::create_directory(base + "/" + name);
    std::ofstream(base + "/" + name + "/w1.sock") << "";
    return open((base + "/" + name + "/agent.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  };
  close(fake_run_dir("cohort-1-dead00"));  // its agent was SIGKILLed: nobody holds the lock
  const int live = fake_run_dir("cohort-2-alive0");
  ASSERT_EQ(flock(live, LOCK_EX), 0);  // a running agent holds its lock
  std::filesystem::create_directory(base + "/cohort-3-keep00");
  std::ofstream(base + "/cohort-3-keep00/flight-round0-rank0.json") << "{}";
  close(open((base + "/cohort-3-keep00/agent.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  {
    WorkerLink link;
    EXPECT_EQ(link.dir().rfind(base + "/cohort-", 0), 0u) << link.dir();
    EXPECT_FALSE(std::filesystem::exists(base + "/cohort-1-dead00"));
    EXPECT_TRUE(std::filesystem::exists(base + "/cohort-2-alive0/w1.sock"));
    EXPECT_TRUE(std::filesystem::exists(base + "/cohort-3-keep00/flight-round0-rank0.json"));  // records stay
  }
  close(live);
  if (old_xdg) {
    setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);
  } else {
    unsetenv("XDG_RUNTIME_DIR");
  }
  std::filesystem::remove_all(base);
}

// --- the hang rule ---

Heartbeat at(int64_t step, int64_t collectives, std::string waiting = "") {
  Heartbeat h;
  h.step = step;
  h.ddp_iterations = step;
  h.collectives = collectives;
  h.waiting_in = std::move(waiting);
  return h;
}

TEST(HangDetector, OffNeverReports) {
  HangDetector d(0);
  const auto t0 = HangDetector::clock::now();
  d.heard(10, at(1, 1), t0);
  EXPECT_FALSE(d.check(t0 + 1h));
}

TEST(HangDetector, AWorkerThatKeepsMakingStepsIsNeverHung) {
  HangDetector d(3);
  auto t = HangDetector::clock::now();
  for (int s = 0; s < 100; ++s, t += 2s) {
    d.heard(10, at(s, s * 2), t);
    EXPECT_FALSE(d.check(t + 1s));
  }
}

// A survivor re-forming its groups around a replaced peer (keep_running) waits for the replacement
// to start, which may take longer than the timeout: while its heartbeats say so it is not stalled,
// and the timeout counts again from when it is done; silence still counts.
TEST(HangDetector, RejoiningIsNotAStallButSilenceStillIs) {
  HangDetector d(3);
  const auto t0 = HangDetector::clock::now();
  d.heard(10, at(5, 20), t0);
  Heartbeat rejoining = at(5, 20);
  rejoining.rejoining = true;
  for (int i = 1; i <= 8; ++i) d.heard(10, rejoining, t0 + i * 1s);  // 8 s without progress
  EXPECT_FALSE(d.check(t0 + 8500ms));
  for (int i = 9; i <= 11; ++i) d.heard(10, at(5, 20), t0 + i * 1s);  // done, then no step for a while
  EXPECT_FALSE(d.check(t0 + 10500ms));
  auto stalled = d.check(t0 + 11500ms);  // 3.5 s after its last rejoining heartbeat
  ASSERT_TRUE(stalled);
  EXPECT_NE(stalled->how.find("made no progress for 3.5 s (alive"), std::string::npos) << stalled->how;

  HangDetector e(3);
  e.heard(11, at(5, 20), t0);
  e.heard(11, rejoining, t0 + 1s);
  auto silent = e.check(t0 + 4500ms);  // SIGSTOPped while rejoining
  ASSERT_TRUE(silent);
  EXPECT_NE(silent->how.find("sent no heartbeat for 3.5 s"), std::string::npos) << silent->how;
}

TEST(HangDetector, BeforeTheFirstStepOnlySilenceCounts) {
  HangDetector d(3);
  const auto t0 = HangDetector::clock::now();
  for (int i = 0; i < 10; ++i) d.heard(10, at(0, 2), t0 + i * 1s);  // loading data: no steps, alive
  EXPECT_FALSE(d.check(t0 + 10s));
  auto hang = d.check(t0 + 13s);  // then silent for 4 s
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->pid, 10);
  EXPECT_TRUE(cohort::launcher::is_hang(hang->how));
  EXPECT_NE(hang->how.find("sent no heartbeat for 4.0 s"), std::string::npos) << hang->how;
}

TEST(HangDetector, BlamesTheSilentWorkerOverThoseWaitingForIt) {
  HangDetector d(3);
  const auto t0 = HangDetector::clock::now();
  d.heard(10, at(5, 20), t0);
  d.heard(11, at(5, 20), t0);
  // 11 stops (SIGSTOP); 10 completes one more collective, then waits in the next one.
  d.heard(10, at(5, 21, "#22 allreduce of ddp bucket 0"), t0 + 500ms);
  for (int i = 1; i <= 4; ++i) d.heard(10, at(5, 21, "#22 allreduce of ddp bucket 0"), t0 + 500ms + i * 750ms);
  EXPECT_FALSE(d.check(t0 + 2900ms));
  auto hang = d.check(t0 + 3500ms);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->pid, 11);
  EXPECT_EQ(hang->how, "made no progress for 3.5 s and sent no heartbeat for 3.5 s (stopped, or frozen?); last heard at "
                       "step 5, 20 collectives completed");
}

TEST(HangDetector, AmongStalledWorkersBlamesTheOneOutsideACollective) {
  HangDetector d(2);
  const auto t0 = HangDetector::clock::now();
  d.heard(10, at(7, 30), t0);
  d.heard(11, at(7, 30), t0);
  for (int i = 1; i <= 6; ++i) {
    d.heard(10, at(7, 30, "#31 barrier (gloo)"), t0 + i * 500ms);  // waits for 11
    d.heard(11, at(7, 30), t0 + i * 500ms);                                   // alive, stuck in its own code
  }
  auto hang = d.check(t0 + 3s);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->pid, 11);
  EXPECT_NE(hang->how.find("made no progress for 3.0 s (alive, at step 7, 30 collectives completed; not in a "
                           "collective"),
            std::string::npos)
      << hang->how;
  d.forget(11);  // it ended: the other one is judged alone
  hang = d.check(t0 + 3s);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->pid, 10);
  EXPECT_NE(hang->how.find("waiting in #31 barrier"), std::string::npos) << hang->how;
}

TEST(HangDetector, WaitsForTheWorkerToBlameToCrossTheLineItself) {
  HangDetector d(2);
  const auto t0 = HangDetector::clock::now();
  d.heard(10, at(7, 30), t0);
  d.heard(11, at(7, 30), t0);
  d.heard(11, at(8, 30), t0 + 500ms);  // its last step was seen one heartbeat later than 10's
  for (int i = 2; i <= 5; ++i) {
    d.heard(10, at(7, 30, "#31 barrier (gloo)"), t0 + i * 500ms);
    d.heard(11, at(8, 30), t0 + i * 500ms);
  }
  EXPECT_FALSE(d.check(t0 + 2100ms));  // 10 crossed; 11, the likelier cause, is at 1.6 s
  auto hang = d.check(t0 + 2500ms);
  ASSERT_TRUE(hang);
  EXPECT_EQ(hang->pid, 11);
  EXPECT_EQ(hang->how.rfind("made no progress for 2.0 s (alive, at step 8", 0), 0u) << hang->how;
}

TEST(HangDetector, ReportStepCallsCountAsProgressEvenWithTheSameStep) {
  HangDetector d(2);
  const auto t0 = HangDetector::clock::now();
  for (int i = 0; i < 20; ++i) {
    Heartbeat h = at(7, 30);
    h.reports = i;  // an evaluation loop calling report_step(7) again and again
    d.heard(10, h, t0 + i * 500ms);
  }
  EXPECT_FALSE(d.check(t0 + 10s));
}

}  // namespace

// A rank that takes long to re-form its groups says where it is, once per period; a quick one
// says nothing (the peers wait for it meanwhile; before this, a stuck one said nothing at all).
TEST(RejoinWatch, NamesTheStageWhileItTakesLongAndNothingWhenQuick) {
  const std::string line = "re-forming the process groups as generation 3: still letting go of the old groups in the Checkpointer after";
  auto count = [&](const std::string& out) {
    size_t n = 0;
    for (size_t at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) ++n;
    return n;
  };
  testing::internal::CaptureStderr();
  {
    cohort::detail::RejoinWatch watch(3, std::chrono::milliseconds(100));
    watch.stage("letting go of the old groups in the Checkpointer");
    std::this_thread::sleep_for(std::chrono::milliseconds(450));
  }
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_GE(count(out), 2u) << out;
  testing::internal::CaptureStderr();
  {
    cohort::detail::RejoinWatch watch(3, std::chrono::milliseconds(100));
    watch.stage("letting go of the old groups in the Checkpointer");
  }
  out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(out), 0u) << out;
}
