// The job token (issue 22) on the agents' channels and in the launcher's options: messages from
// anyone without the token — a stranger, an agent of another job, a recording of this job's own
// traffic replayed on another connection or out of order — are refused and never delivered; the
// token file is read only when only its owner can; the token itself never reaches the workers.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cohort/error.h"
#include "launcher/io/channel.h"
#include "launcher/io/job_token.h"

using namespace cohort::launcher;
using json = nlohmann::json;

namespace {

const std::string kToken(64, 'a');

// Everything readable on `fd` within `ms` of silence.
std::string drain(int fd, int ms = 200) {
  std::string out;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, ms) > 0) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void put(int fd, const std::string& bytes) {
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

struct Pair {  // two ends of a socket: `a` for a Channel, `b` for the test's raw bytes
  int a = -1, b = -1;
  Pair() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) a = sv[0], b = sv[1];
  }
  ~Pair() {
    if (b >= 0) close(b);
  }
};

// The lines a Channel with `token` sends for `messages` to a peer whose hello the test wrote.
std::string recorded(const std::string& token, const std::vector<json>& messages) {
  Pair p;
  Channel sender(p.a, token);
  put(p.b, "cohort-hello-1 " + std::string(32, '0') + "\n");
  for (const auto& m : messages) EXPECT_TRUE(sender.send(m));
  return drain(p.b);
}

}  // namespace

TEST(LauncherAuth, ChannelsWithTheSameTokenTalkBothWays) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Channel a(sv[0], kToken), b(sv[1], kToken);
  ASSERT_TRUE(a.send({{"type", "join"}, {"node_rank", 1}, {"nnodes", 2}, {"nproc", 1}}));
  ASSERT_TRUE(b.send({{"type", "start"}, {"round", 0}, {"world_size", 2}, {"rank_base", 1}}));
  ASSERT_TRUE(a.send({{"type", "beat"}}));
  std::vector<json> at_a, at_b;
  EXPECT_TRUE(b.receive(at_b));
  EXPECT_TRUE(a.receive(at_a));
  ASSERT_EQ(at_b.size(), 2u);
  EXPECT_EQ(at_b[0]["node_rank"], 1);
  EXPECT_EQ(at_b[1]["type"], "beat");
  ASSERT_EQ(at_a.size(), 1u);
  EXPECT_EQ(at_a[0]["rank_base"], 1);
}

TEST(LauncherAuth, AnotherJobsTokenIsRefusedAndTheSenderToldWhy) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Channel ours(sv[0], kToken), theirs(sv[1], std::string(64, 'b'));
  ASSERT_TRUE(theirs.send({{"type", "stop"}, {"round", 0}}));
  std::vector<json> got;
  EXPECT_FALSE(ours.receive(got));
  EXPECT_TRUE(got.empty());  // never acted on
  EXPECT_FALSE(theirs.receive(got));
  EXPECT_NE(theirs.refusal().find("fails authentication"), std::string::npos) << theirs.refusal();
  EXPECT_NE(theirs.refusal().find("same job token"), std::string::npos) << theirs.refusal();
}

TEST(LauncherAuth, StrangersWithoutAHelloOrAMacAreRefused) {
  const std::vector<std::pair<std::string, std::string>> attacks{
      {"{\"type\":\"stop\",\"round\":0}\n", "did not begin with a cohort agent's hello"},
      {"cohort-hello-1 " + std::string(32, 'f') + "\n{\"type\":\"stop\",\"round\":0}\n", "fails authentication"},
      {"cohort-hello-1 " + std::string(32, 'f') + "\n" + std::string(64, '0') + " {\"type\":\"stop\",\"round\":0}\n",
       "fails authentication"},
  };
  for (const auto& [bytes, reason] : attacks) {
    Pair p;
    Channel ours(p.a, kToken);
    put(p.b, bytes);
    std::vector<json> got;
    EXPECT_FALSE(ours.receive(got)) << bytes;
    EXPECT_TRUE(got.empty()) << bytes;
    const std::string answer = drain(p.b);  // our hello, then why the peer was refused
    EXPECT_NE(answer.find("\ncohort-refused "), std::string::npos) << answer;
    EXPECT_NE(answer.find(reason), std::string::npos) << answer;
  }
}

TEST(LauncherAuth, ATrueRecordingReplayedOnAnotherConnectionIsRefused) {
  // What an eavesdropper saw of a real agent's connection: its hello and a signed "stop" (and a
  // signed job end). Played to another connection, whose nonce is new, nothing of it is accepted.
  const std::string recording =
      recorded(kToken, {{{"type", "stop"}, {"round", 0}}, {{"type", "end"}, {"summary", "stopped by a replay"}}});
  ASSERT_NE(recording.find("\"stop\""), std::string::npos) << recording;
  Pair p;
  Channel ours(p.a, kToken);
  put(p.b, recording);
  std::vector<json> got;
  EXPECT_FALSE(ours.receive(got));
  EXPECT_TRUE(got.empty());
  EXPECT_NE(drain(p.b).find("fails authentication"), std::string::npos);
}

TEST(LauncherAuth, AMessageRepeatedOrDroppedWithinAConnectionIsRefused) {
  // The test sits between two agents and forwards their bytes, then repeats or skips one message.
  for (const bool repeat : {true, false}) {
    Pair left, right;
    Channel sender(left.a, kToken), receiver(right.a, kToken);
    put(left.b, drain(right.b));  // the receiver's hello to the sender
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(sender.send({{"type", "beat"}}));
    std::string bytes = drain(left.b);  // the sender's hello and three lines
    std::vector<std::string> lines;
    for (size_t start = 0, nl; (nl = bytes.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(bytes.substr(start, nl + 1 - start));
    ASSERT_EQ(lines.size(), 4u);
    // Message 0 arrives; then message 0 again (repeated) or message 2 in 1's place (dropped).
    put(right.b, lines[0] + lines[1] + (repeat ? lines[1] : lines[3]));
    std::vector<json> got;
    EXPECT_FALSE(receiver.receive(got)) << (repeat ? "repeated" : "dropped");
    EXPECT_EQ(got.size(), 1u) << (repeat ? "repeated" : "dropped");
  }
}

TEST(LauncherAuth, TokenFileMustBeTheOwnersAloneAndLongEnough) {
  const auto dir = std::filesystem::temp_directory_path() / ("cohort_token_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto write_file = [&](const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  };
  auto problem = [](const std::string& path) -> std::string {
    RunOptions o;
    o.job_token_file = path;
    try {
      load_job_token(o);
      return "loaded " + o.job_token;
    } catch (const cohort::ConfigError& e) {
      return e.what();
    }
  };
  const std::string good(64, 'c');
  EXPECT_EQ(problem(write_file("good", good + "\n", 0600)), "loaded " + good);
  EXPECT_NE(problem(write_file("shared", good, 0644)).find("other users may read or change it (mode 0644); chmod 600"),
            std::string::npos);
  EXPECT_NE(problem(write_file("short", "abc\n", 0600)).find("holds 3 characters; a job token needs 32"),
            std::string::npos);
  EXPECT_NE(problem((dir / "missing").string()).find("No such file or directory"), std::string::npos);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(problem(fifo).find("not a regular file"), std::string::npos);  // and no hang
  std::filesystem::remove_all(dir);
}

TEST(LauncherAuth, TheEnvironmentsTokenIsTakenAndNotPassedOn) {
  const std::string token(40, 'e');
  setenv("COHORT_JOB_TOKEN", token.c_str(), 1);
  RunOptions o;
  load_job_token(o);
  EXPECT_EQ(o.job_token, token);
  EXPECT_EQ(std::getenv("COHORT_JOB_TOKEN"), nullptr);  // the workers inherit this environment
  const std::string key = worker_job_key(o);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find(token), std::string::npos);
}

TEST(LauncherAuth, NodeZeroMakesAnOwnerOnlyTokenFileAndAJoinerNeedsOne) {
  const auto dir = std::filesystem::temp_directory_path() / ("cohort_token_run_" + std::to_string(getpid()));
  RunOptions host;
  host.run_dir = dir.string();
  ensure_shared_job_token(host);
  EXPECT_EQ(host.job_token_file, (dir / "job-token").string());
  struct stat st {};
  ASSERT_EQ(stat(host.job_token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  RunOptions member;
  member.job_token_file = host.job_token_file;
  load_job_token(member);
  EXPECT_EQ(member.job_token, host.job_token);
  RunOptions stranger;
  try {
    require_job_token(stranger, "node 1");
    ADD_FAILURE() << "a node without a token was let through";
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("node 1 has no job token: start it with --job-token-file"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
