// Attacks from issue 22's probe, replayed against real agents on loopback: a stranger connects to
// the static rendezvous (node 0) or the elastic rendezvous host and sends lines that are not
// messages of the protocol, or are with fields of the wrong kind. The agent drops the connection,
// names it once on stderr, and the job goes on and succeeds when the real node joins. Worker-link
// datagrams have their own test (HangWorkerLink.DropsMistypedAndSpoofedDatagrams).
#include <gtest/gtest.h>

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
  EXPECT_NE(r0.err.find("dropped a connection from 127.0.0.1: no \"type\" string"), std::string::npos) << r0.err;
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
