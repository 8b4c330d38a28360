// Elastic membership's pure rules, in-process: --nnodes N / MIN:MAX, the endpoint, which nodes sit
// in a round and where, and when a rendezvous that waits for nodes forms its round.
#include <gtest/gtest.h>

#include "cohort/error.h"
#include "launcher/config/elastic_options.h"
#include "launcher/elastic/membership.h"

using namespace cohort::launcher;

TEST(LauncherMembership, NnodesIsACountOrARange) {
  RunOptions o;
  EXPECT_TRUE(parse_nnodes("4", o));
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.min_nodes, 0);
  EXPECT_TRUE(parse_nnodes("2:3", o));
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 3);
  EXPECT_EQ(o.nnodes, 3);
  for (const char* bad : {"", "x", "2:", ":3", "2:3:4", "-1", "2.5", "1:x"}) EXPECT_FALSE(parse_nnodes(bad, o)) << bad;
}

TEST(LauncherMembership, ElasticOptionsAreCheckedAndFilledIn) {
  RunOptions o;
  parse_nnodes("2:3", o);
  EXPECT_THROW(finalize_elastic_options(o), cohort::ConfigError);  // a range needs an endpoint
  o.rdzv_endpoint = "127.0.0.1:29400";
  EXPECT_THROW(finalize_elastic_options(o), cohort::ConfigError);  // ... and an id
  o.rdzv_id = "job";
  finalize_elastic_options(o);
  EXPECT_EQ(o.nnodes, 3);

  RunOptions n;  // --nnodes N with an endpoint: N:N, port defaulting to torchrun's
  parse_nnodes("2", n);
  n.rdzv_endpoint = "localhost";
  n.rdzv_id = "job";
  finalize_elastic_options(n);
  EXPECT_EQ(n.min_nodes, 2);
  EXPECT_EQ(n.max_nodes, 2);
  EXPECT_EQ(n.rdzv_endpoint, "127.0.0.1:29400");

  RunOptions r;
  parse_nnodes("3:2", r);
  r.rdzv_endpoint = "127.0.0.1:1";
  r.rdzv_id = "job";
  EXPECT_THROW(finalize_elastic_options(r), cohort::ConfigError);
  EXPECT_THROW(parse_endpoint("127.0.0.1:99999"), cohort::ConfigError);
}

TEST(LauncherMembership, RoundsSeatTheFirstMaxNodesByJoinOrderRanksNodeByNode) {
  // Ids in join order, given out of order; node 2 left earlier; 7 came back last.
  Seating s = seat_nodes({{7, 1}, {0, 2}, {3, 4}, {1, 1}}, 3);
  ASSERT_EQ(s.seats.size(), 3u);
  EXPECT_EQ(s.seats[0].id, 0);
  EXPECT_EQ(s.seats[1].id, 1);
  EXPECT_EQ(s.seats[2].id, 3);  // 7 stays a spare: MAX is 3
  EXPECT_EQ(s.seats[2].node_rank, 2);
  EXPECT_EQ(s.seats[1].rank_base, 2);
  EXPECT_EQ(s.seats[2].rank_base, 3);
  EXPECT_EQ(s.world_size, 7);
}

TEST(LauncherMembership, GatheringFormsAtMaxAtOnceAndAtMinAfterTheSettleTime) {
  using std::chrono::milliseconds;
  const auto t0 = Gathering::Clock::now();
  Gathering g(2, 4, 1.0);
  EXPECT_FALSE(g.ready(1, t0));
  EXPECT_EQ(g.ms_to_settle(t0), -1);
  EXPECT_FALSE(g.ready(2, t0));  // MIN: the settle window opens
  EXPECT_EQ(g.ms_to_settle(t0 + milliseconds(400)), 600);
  EXPECT_FALSE(g.ready(3, t0 + milliseconds(900)));
  EXPECT_TRUE(g.ready(3, t0 + milliseconds(1000)));
  EXPECT_FALSE(g.ready(1, t0 + milliseconds(1100)));  // a node left: the window starts again
  EXPECT_FALSE(g.ready(2, t0 + milliseconds(1200)));
  EXPECT_TRUE(g.ready(4, t0 + milliseconds(1200)));  // MAX: at once
}
