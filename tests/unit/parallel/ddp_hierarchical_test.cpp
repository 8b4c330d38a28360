// DDP's hierarchical allreduce (DDPOptions::allreduce, docs/communication.md): nodes of several
// ranks — thread ranks that declare node-major nodes, each node's ranks sharing memory — average
// like the flat allreduce, every rank bitwise equal; automatic picks it only where it applies.
#include <gtest/gtest.h>

#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "support/comm_runs.h"

namespace {

using namespace cohort::testing;

RankOptions nodes_of(int ranks_per_node) {
  RankOptions o;
  o.ranks_per_node = ranks_per_node;
  return o;
}

TEST(DdpHierarchical, TwoNodesOfTwoRanksAverageLikeTheFlatAllreduceAndRanksAreBitwiseEqual) {
  const auto flat = train_with(4, 4, 3, 16, [](cohort::DDPOptions& o) { o.allreduce = cohort::AllreduceAlgo::flat; },
                               nodes_of(2));
  const auto hier = train_with(4, 4, 3, 16, {}, nodes_of(2));  // automatic
  EXPECT_FALSE(flat.stats[0].hierarchical);
  for (const auto& s : hier.stats) EXPECT_TRUE(s.hierarchical);
  expect_ranks_bitwise_equal(hier);
  expect_close(hier.params[0], flat.params[0], 1e-5, 1e-6);
  // Between nodes each rank sends its half of each bucket (and a flag sum flat): under 60 %.
  EXPECT_LT(static_cast<double>(hier.stats[0].bytes_on_wire), 0.6 * static_cast<double>(hier.stats[0].bytes_allreduced));
}

TEST(DdpHierarchical, ThreeNodesOfTwoWithBucketsThatDoNotDivideAndAHookOnTop) {
  // Odd bucket sizes take the padded path, for the fp32 allreduce, the fp16 hook's halves and
  // PowerSGD's floats alike.
  const auto flat = train_with(6, 3, 2, 16, [](cohort::DDPOptions& o) { o.allreduce = cohort::AllreduceAlgo::flat; },
                               nodes_of(2));
  const auto hier = train_with(
      6, 3, 2, 16, [](cohort::DDPOptions& o) { o.allreduce = cohort::AllreduceAlgo::hierarchical; }, nodes_of(2));
  expect_ranks_bitwise_equal(hier);
  expect_close(hier.params[0], flat.params[0], 1e-5, 1e-6);
  const auto fp16 = train_with(6, 3, 2, 16, [](cohort::DDPOptions& o) { o.comm_hook = cohort::fp16_compress_hook(); },
                               nodes_of(2));
  expect_ranks_bitwise_equal(fp16);
  expect_close(fp16.params[0], flat.params[0], 2e-3, 2e-3);
  cohort::PowerSGDOptions p;
  p.rank = 2;
  p.start_step = 1;
  const auto psgd = train_with(6, 3, 2, 64, [&](cohort::DDPOptions& o) { o.comm_hook = cohort::powersgd_hook(p); },
                               nodes_of(2));
  EXPECT_TRUE(psgd.stats[0].hierarchical);
  expect_ranks_bitwise_equal(psgd);
}

// The fp16 and bf16 hooks over the hierarchical allreduce: summed in float inside each node,
// compressed only between nodes — every rank bitwise equal, close to the fp32 average, and a
// quarter of the fp32 bytes on the link from each rank of 2 per node (its half, in 16 bits).
TEST(DdpHierarchical, CompressedHooksCompressOnlyBetweenNodes) {
  for (int nodes : {2, 3}) {
    const auto flat = train_with(2 * nodes, 3, 2, 16,
                                 [](cohort::DDPOptions& o) { o.allreduce = cohort::AllreduceAlgo::flat; }, nodes_of(2));
    for (const char* dtype : {"fp16", "bf16"}) {
      SCOPED_TRACE(std::string(dtype) + ", " + std::to_string(nodes) + " nodes");
      const bool half = std::string(dtype) == "fp16";
      const auto hier = train_with(
          2 * nodes, 3, 2, 16,
          [&](cohort::DDPOptions& o) {
            o.allreduce = cohort::AllreduceAlgo::hierarchical;
            o.comm_hook = half ? cohort::fp16_compress_hook() : cohort::bf16_compress_hook();
          },
          nodes_of(2));
      for (const auto& st : hier.stats) EXPECT_TRUE(st.hierarchical);
      expect_ranks_bitwise_equal(hier);
      expect_close(hier.params[0], flat.params[0], half ? 2e-3 : 2e-2, half ? 2e-3 : 2e-2);
      EXPECT_LT(static_cast<double>(hier.stats[0].bytes_on_wire), 0.3 * static_cast<double>(hier.stats[0].bytes_allreduced))
          << hier.stats[0].bytes_on_wire << " of " << hier.stats[0].bytes_allreduced;
    }
  }
}

TEST(DdpHierarchical, AutomaticStaysFlatOnOneNodeOrOneRankPerNode) {
  RankOptions one_node;
  one_node.same_machine = true;
  EXPECT_FALSE(train_with(2, 1, 2, 8, {}, one_node).stats[0].hierarchical);
  EXPECT_FALSE(train_with(2, 1, 2, 8, {}, nodes_of(1)).stats[0].hierarchical);
}

TEST(DdpHierarchical, AskedForWhereItCannotRunIsOneClearErrorOnEveryRank) {
  RankOptions one_node;
  one_node.same_machine = true;
  auto errors = run_ranks_collect(
      2,
      [](std::shared_ptr<cohort::Context> ctx) {
        SmallNet net;
        cohort::DDPOptions o;
        o.allreduce = cohort::AllreduceAlgo::hierarchical;
        auto model = cohort::DistributedDataParallel(net, ctx, o);
      },
      one_node);
  for (int r = 0; r < 2; ++r) {
    try {
      ASSERT_TRUE(errors[r]) << "rank " << r;
      std::rethrow_exception(errors[r]);
    } catch (const cohort::ConfigError& e) {
      EXPECT_STREQ(e.what(), ("rank " + std::to_string(r) +
                              ": DDP allreduce 'hierarchical' is not possible in this job: every rank on one node")
                                 .c_str());
    }
  }
}

}  // namespace
