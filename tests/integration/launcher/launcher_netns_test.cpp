// Two nodes as two network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2, addresses that
// exist only inside this test's own namespaces): `cohort run` on each, the Fashion-MNIST example
// trains a few steps over the "network", and both ranks end with the same parameters.
// Needs root and iproute2 (`ip netns`); skipped with the reason otherwise. The namespaces are
// named after this process and removed at the end, also when the test fails.
#include <gtest/gtest.h>

#include <regex>

#include "launcher_test_util.h"
#include "support/netns.h"

using namespace launcher_test;
using cohort::testing::NamespacePair;

namespace {

std::string checksum_of(const std::string& out) {
  std::smatch m;
  std::regex re(R"re("param_checksum":\s*("?[^,}"]+"?))re");
  return std::regex_search(out, m, re) ? m[1].str() : "";
}

}  // namespace

TEST(LauncherNetns, TwoNodesTrainFashionMnistAndAgree) {
  const std::string ip = find_ip();
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  if (ip.empty()) GTEST_SKIP() << "needs iproute2 (ip netns); scripts/setup.sh installs it";
  NamespacePair ns(ip, "", "10.77.0");
  ASSERT_TRUE(ns.ok()) << "could not create the namespaces and veth pair";

  auto node = [&](int rank) {
    return ns.exec_in(rank == 0, {COHORT_BIN, "run", "--nnodes", "2", "--node-rank", std::to_string(rank),
                                  "--nproc-per-node", "1", "--master-addr", "10.77.0.1", "--master-port", "29500",
                                  "--rdzv-timeout", "60", "--threads-per-proc", "1", "--", FASHION_MNIST_BIN,
                                  "--max-steps", "5", "--no-eval", "--threads", "1"});
  };
  Child n1(node(1));  // the second node may start first
  Child n0(node(0));
  Result r0 = n0.wait(240), r1 = n1.wait(240);
  ASSERT_FALSE(r0.timed_out || r1.timed_out);
  ASSERT_EQ(r0.exit_code(), 0) << r0.out << r0.err;
  ASSERT_EQ(r1.exit_code(), 0) << r1.out << r1.err;
  EXPECT_NE(r0.out.find("[0] {"), std::string::npos) << r0.out;
  EXPECT_NE(r1.out.find("[1] {"), std::string::npos) << r1.out;
  const std::string c0 = checksum_of(r0.out), c1 = checksum_of(r1.out);
  EXPECT_FALSE(c0.empty()) << r0.out;
  EXPECT_EQ(c0, c1) << "node 0:\n" << r0.out << "node 1:\n" << r1.out;
}
