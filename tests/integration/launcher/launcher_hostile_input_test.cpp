// Attacks from issue 22's probe, replayed against real agents on loopback: a stranger connects to
// the static rendezvous (node 0) or the elastic rendezvous host and sends lines that are not
// authenticated messages of the protocol (a join in a real node's place, a type that is not a
// string, ...). The agent drops the connection, names it once on stderr, and the job goes on and
// succeeds when the real node joins. A node with another job's token is refused with one line; a
// job started without a token gets one from node 0. A stranger who writes forged checkpoint commit
// parts into a job's store harms no checkpoint. Channel-level attacks (replays, reordering) are in
// launcher_auth_test.cpp; worker-link datagrams in HangWorkerLink.DropsMistypedAndSpoofedDatagrams.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "launcher_test_util.h"

using namespace launcher_test;

namespace {

// Connects to 127.0.0.1:port, retrying for up to 20 s (the agent may still be starting), sends
// `lines` and waits until the agent closed the connection; returns whether it did.
bool send_and_wait_for_close(int port, const std::string& lines) {
  const auto deadline = clock::now() + std::chrono::seconds(20);
  int fd = -1;
  while (fd < 0 && clock::now() < deadline) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (fd < 0) return false;
  if (write(fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) return false;
  pollfd p{fd, POLLIN, 0};
  char buf[256];
  bool closed = false;
  while (!closed && poll(&p, 1, 10000) > 0) closed = read(fd, buf, sizeof(buf)) <= 0;
  close(fd);
  return closed;
}

const std::vector<std::string> kAttacks{
    "{\"type\":7}\n",                                            // a type that is not a string
    "{\"type\":1}\n",                                            // the probe's elastic killer
    "{\"type\":\"join\",\"node_rank\":\"1\",\"nnodes\":2}\n",    // a rank that is a string
    "{\"type\":\"join\",\"rdzv_id\":\"job\",\"min\":\"x\"}\n",   // elastic join with a bad range
    "{\"type\":\"join\",\"node_rank\":1,\"nproc\":1e300}\n",     // a count out of int's range
    "not json at all\n",
    // a stranger who speaks the protocol, without the job's token: a join in node 1's place
    "cohort-hello-1 0123456789abcdef0123456789abcdef\n" + std::string(64, '0') +
        " {\"type\":\"join\",\"node_rank\":1,\"nnodes\":2,\"nproc\":1}\n",
};

}  // namespace

TEST(LauncherHostileInput, StaticNodeZeroDropsStrangersAndTheJobGoesOn) {
  const int port = free_port_pair();
  auto node = [&](int rank) {
    return std::vector<std::string>{COHORT_BIN,      "run",  "--nnodes",        "2",
                                    "--node-rank",   std::to_string(rank), "--nproc-per-node", "1",
                                    "--master-addr", "127.0.0.1", "--master-port", std::to_string(port),
                                    "--rdzv-timeout", "60", "--", ENV_PROBE_BIN};
  };
  Child n0(node(0));
  for (const auto& attack : kAttacks) EXPECT_TRUE(send_and_wait_for_close(port + 1, attack)) << attack;
  Child n1(node(1));
  Result r0 = n0.wait(60), r1 = n1.wait(60);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_NE(r0.err.find("dropped a connection from 127.0.0.1: it did not begin with a cohort agent's hello"),
            std::string::npos)
      << r0.err;
  EXPECT_NE(r1.out.find("ENV COHORT_WORLD_SIZE=2"), std::string::npos) << r1.out;
}

TEST(LauncherHostileInput, ElasticHostDropsStrangersAndTheJobGoesOn) {
  const int port = free_port();
  auto agent = [&](const std::string& role) {
    return std::vector<std::string>{COHORT_BIN,      "run", "--nnodes", "2:2", "--rdzv-endpoint",
                                    "127.0.0.1:" + std::to_string(port), "--rdzv-id", "job", "--rdzv-role", role,
                                    "--nproc-per-node", "1", "--rdzv-timeout", "60", "--", ENV_PROBE_BIN};
  };
  Child host(agent("host"));
  for (const auto& attack : kAttacks) EXPECT_TRUE(send_and_wait_for_close(port, attack)) << attack;
  Child member(agent("member"));
  Result rh = host.wait(60), rm = member.wait(60);
  ASSERT_FALSE(rh.timed_out || rm.timed_out);
  EXPECT_EQ(rh.exit_code(), 0) << rh.err;
  EXPECT_EQ(rm.exit_code(), 0) << rm.err;
  EXPECT_NE(rh.err.find("dropped a connection from 127.0.0.1"), std::string::npos) << rh.err;
  EXPECT_NE(rm.out.find("ENV COHORT_WORLD_SIZE=2"), std::string::npos) << rm.out;
}

namespace {

std::vector<std::string> static_node(int port, int rank, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{COHORT_BIN,      "run",         "--nnodes",      "2",
                                "--node-rank",   std::to_string(rank), "--nproc-per-node", "1",
                                "--master-addr", "127.0.0.1",   "--master-port", std::to_string(port),
                                "--rdzv-timeout", "60"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.push_back(ENV_PROBE_BIN);
  return argv;
}

}  // namespace

TEST(LauncherHostileInput, ANodeWithAnotherJobsTokenIsRefusedInOneLine) {
  const int port = free_port_pair();
  Child n0(static_node(port, 0));  // the suite's token (tests/CMakeLists.txt)
  Result wrong = run(static_node(port, 1), 60, {"COHORT_JOB_TOKEN=another-job-s-token-0123456789abcdef"});
  ASSERT_FALSE(wrong.timed_out);
  EXPECT_EQ(wrong.exit_code(), 1) << wrong.err;
  EXPECT_NE(wrong.err.find("cohort run: error: node 0's cohort run at 127.0.0.1:" + std::to_string(port + 1) +
                           " closed the connection during the rendezvous: it refused this node's messages: a message "
                           "that fails authentication"),
            std::string::npos)
      << wrong.err;
  Child n1(static_node(port, 1));  // the right token: the job goes on
  Result r0 = n0.wait(60), r1 = n1.wait(60);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_NE(r0.err.find("fails authentication"), std::string::npos) << r0.err;
}

TEST(LauncherHostileInput, WithoutATokenNodeZeroMakesOneAndTheOthersNeedIt) {
  const int port = free_port_pair();
  TempDir temp;
  const std::string dir = temp.path();
  const std::vector<std::string> no_token{"COHORT_JOB_TOKEN="};
  Child n0(static_node(port, 0, {"--run-dir", dir}), no_token);
  const std::string token_file = dir + "/job-token";
  for (int i = 0; i < 200 && access(token_file.c_str(), R_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  struct stat st {};
  ASSERT_EQ(stat(token_file.c_str(), &st), 0) << "node 0 made no token file";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result bare = run(static_node(port, 1), 30, no_token);
  EXPECT_EQ(bare.exit_code(), 2) << bare.err;
  EXPECT_NE(bare.err.find("cohort run: error: node 1 has no job token: start it with --job-token-file"),
            std::string::npos)
      << bare.err;
  Child n1(static_node(port, 1, {"--job-token-file", token_file}), no_token);
  Result r0 = n0.wait(60), r1 = n1.wait(60);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_NE(r0.err.find("cohort run: this job's token is in " + token_file), std::string::npos) << r0.err;
  EXPECT_NE(r1.out.find("ENV COHORT_WORLD_SIZE=2"), std::string::npos) << r1.out;
}

TEST(LauncherHostileInput, ForgedCheckpointCommitPartsInTheStoreHarmNoCheckpoint) {
  // The probe's attack: a stranger connects to the job's TCPStore (a job of two nodes has one on
  // its master address) and writes {"error": ...} as every rank's commit part of the next saves.
  // Rank 1 reports late (ckpt_probe --late-ms), so rank 0 finds the forged part of rank 1 there
  // before the real one: without authentication each of those saves failed. The stranger forges
  // the saves from the 20th on while the ranks hold at step 10 (ckpt_probe --hold-at): a forged value written over a rank's real part in
  // the moment between its set and rank 0's read would lose that part (the store's keys are
  // anyone's to overwrite: a denial of service the token cannot prevent, docs/security.md).
  const char* python = std::getenv("COHORT_PYTHON");
  const int port = free_port_pair();
  TempDir temp;
  const std::string dir = temp.path() + "/ckpt";
  auto node = [&](int rank) {
    return std::vector<std::string>{COHORT_BIN, "run", "--nnodes", "2", "--node-rank", std::to_string(rank),
                                    "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                                    std::to_string(port), "--rdzv-timeout", "60", "--threads-per-proc", "1", "--",
                                    CKPT_PROBE_BIN, "--dir", dir, "--mode", "steps", "--steps", "40", "--floats",
                                    "1000", "--late-ms", "300", "--hold-at", "10", "--hold-for",
                                    temp.path() + "/forged"};
  };
  const std::string attack =
      "import datetime, sys, time\n"
      "from torch.distributed import TCPStore\n"
      "open('" + temp.path() + "/stranger-ready', 'w').close()\n"
      "deadline = time.time() + 60\n"
      "while True:\n"
      "    try:\n"
      "        s = TCPStore('127.0.0.1', " + std::to_string(port) + ", None, False, datetime.timedelta(seconds=5))\n"
      "        break\n"
      "    except Exception:\n"
      "        if time.time() > deadline: sys.exit(3)\n"
      "        time.sleep(0.05)\n"
      "for seq in range(4):\n"
      "    for save in range(20, 40):\n"
      "        for rank in range(2):\n"
      "            s.set('cohort/ckpt/%d/%d/%d' % (seq, save, rank), '{\"error\": \"forged by a stranger\"}')\n"
      "open('" + temp.path() + "/forged', 'w').close()\n"
      "print('forged', flush=True)\n";
  // The stranger first (importing torch takes seconds), then the job.
  Child stranger({python ? python : "/usr/bin/python3", "-c", attack});
  const std::string ready = temp.path() + "/stranger-ready";
  for (int i = 0; i < 1200 && access(ready.c_str(), F_OK) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Child n0(node(0)), n1(node(1));
  Result r0 = n0.wait(240), r1 = n1.wait(240), rs = stranger.wait(120);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  EXPECT_NE(rs.out.find("forged"), std::string::npos) << rs.err;  // the attack did reach the store
  EXPECT_EQ(r0.exit_code(), 0) << r0.err;
  EXPECT_EQ(r1.exit_code(), 0) << r1.err;
  EXPECT_EQ(r0.out.find("save failed"), std::string::npos) << r0.out;
  EXPECT_NE(r0.out.find("saved 40"), std::string::npos) << r0.out;
  EXPECT_EQ(r0.out.find("gave up waiting"), std::string::npos) << r0.out;  // the forging came first
  // Rank 0 met the forged parts and waited for the real ones.
  EXPECT_NE(r0.err.find("ignored a checkpoint commit part for rank 1"), std::string::npos) << r0.err;
  Result verify = run({COHORT_BIN, "ckpt", "verify", dir + "/step-00000040"}, 60);
  EXPECT_EQ(verify.exit_code(), 0) << verify.out << verify.err;
}
