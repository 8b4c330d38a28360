// cohort::DeviceMesh (issue 47) with ranks as threads: the layout (last dimension innermost), each
// slice's group reducing over exactly its ranks, two meshes on one job apart, and bad sizes as one
// line naming the rank, the sizes and the world.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "support/thread_ranks.h"

namespace cohort {
namespace {

using testing::run_ranks;
using testing::run_ranks_collect;

// The expected layout, written out: rank = ((c0 · s1) + c1) · s2 + c2 ...
std::vector<int> row_major(int rank, const std::vector<MeshDim>& dims) {
  std::vector<int> c(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    c[i] = rank % dims[i].size;
    rank /= dims[i].size;
  }
  return c;
}

int64_t allreduce(const c10::intrusive_ptr<Backend>& group, int64_t value) {
  std::vector<at::Tensor> t{torch::tensor({value}, torch::kLong)};
  group->allreduce(t)->wait();
  return t[0].item<int64_t>();
}

// Every rank checks each dimension's slice: its ranks, and the group's sum of the rank numbers and
// of 2^rank (which names the set of ranks exactly).
void expect_slices(const std::vector<MeshDim>& dims) {
  int world = 1;
  for (const auto& d : dims) world *= d.size;
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, dims);
    const int me = ctx->rank();
    ASSERT_EQ(mesh.coordinates(), row_major(me, dims));
    ASSERT_EQ(mesh.rank_at(mesh.coordinates()), me);
    for (size_t d = 0; d < dims.size(); ++d) {
      std::vector<int> expected;
      for (int r = 0; r < world; ++r) {
        auto a = row_major(r, dims), b = row_major(me, dims);
        a[d] = b[d] = 0;
        if (a == b) expected.push_back(r);
      }
      const std::string& name = dims[d].name;
      EXPECT_EQ(mesh.slice_ranks(name), expected) << "rank " << me << " along " << name;
      EXPECT_EQ(mesh.coordinate(name), row_major(me, dims)[d]);
      const auto& group = mesh.group(name);
      ASSERT_TRUE(group);
      EXPECT_EQ(group->getSize(), dims[d].size);
      EXPECT_EQ(group->getRank(), mesh.coordinate(name));
      int64_t sum = 0, bits = 0;
      for (int r : expected) sum += r, bits += int64_t{1} << r;
      EXPECT_EQ(allreduce(group, me), sum) << "rank " << me << " along " << name;
      EXPECT_EQ(allreduce(group, int64_t{1} << me), bits) << "rank " << me << " along " << name;
    }
  });
}

TEST(DeviceMesh, SliceGroupsOfATwoByTwoMeshReduceOverExactlyTheirRanks) {
  expect_slices({{"dp", 2}, {"tp", 2}});
}

TEST(DeviceMesh, SliceGroupsOfATwoByTwoByTwoMeshReduceOverExactlyTheirRanks) {
  expect_slices({{"pp", 2}, {"dp", 2}, {"tp", 2}});
}

TEST(DeviceMesh, TpIsInnermostAndDimensionsOfOneAreAllowed) {
  run_ranks(4, [](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", 2}, {"dp", 1}, {"tp", 2}});
    const int me = ctx->rank();
    // tp peers are consecutive ranks (one machine); pp peers are two apart.
    EXPECT_EQ(mesh.slice_ranks("tp"), (std::vector<int>{me - me % 2, me - me % 2 + 1}));
    EXPECT_EQ(mesh.slice_ranks("pp"), (std::vector<int>{me % 2, me % 2 + 2}));
    EXPECT_EQ(mesh.slice_ranks("dp"), std::vector<int>{me});
    EXPECT_EQ(allreduce(mesh.group("dp"), me + 1), me + 1);
    EXPECT_EQ(mesh.coordinates(3), (std::vector<int>{1, 0, 1}));
    EXPECT_EQ(mesh.size("tp"), 2);
  });
}

TEST(DeviceMesh, TwoMeshesOnOneJobKeepTheirGroupsApart) {
  run_ranks(4, [](std::shared_ptr<Context> ctx) {
    DeviceMesh flat(ctx, {{"dp", 4}});
    DeviceMesh grid(ctx, {{"dp", 2}, {"tp", 2}});
    const int me = ctx->rank();
    EXPECT_EQ(allreduce(grid.group("tp"), me), me % 2 == 0 ? 2 * me + 1 : 2 * me - 1);
    EXPECT_EQ(allreduce(flat.group("dp"), me), 0 + 1 + 2 + 3);
    EXPECT_EQ(allreduce(grid.group("dp"), me), me % 2 == 0 ? 2 : 4);
  });
}

TEST(DeviceMesh, AProductThatIsNotTheWorldIsOneLineOnEveryRank) {
  const auto errors = run_ranks_collect(4, [](std::shared_ptr<Context> ctx) {
    DeviceMesh mesh(ctx, {{"pp", 2}, {"dp", 3}, {"tp", 1}});
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " accepted a 6-rank mesh in a world of 4";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(r) +
                                           ": device mesh pp=2 x dp=3 x tp=1 has 6 ranks, but the world has 4: "
                                           "the sizes' product must be the world size");
    }
  }
}

TEST(DeviceMesh, BadDimensionsAndNamesAreConfigErrors) {
  run_ranks(2, [](std::shared_ptr<Context> ctx) {
    EXPECT_THROW(DeviceMesh(ctx, {{"dp", 2}, {"dp", 1}}), ConfigError);
    EXPECT_THROW(DeviceMesh(ctx, {{"dp", 0}, {"tp", 2}}), ConfigError);
    EXPECT_THROW(DeviceMesh(ctx, {}), ConfigError);
    DeviceMesh mesh(ctx, {{"dp", 2}});
    try {
      mesh.group("tp");
      ADD_FAILURE() << "a group along a dimension the mesh does not have";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(ctx->rank()) +
                                           ": the device mesh has no dimension 'tp' (it has dp)");
    }
    EXPECT_THROW(mesh.rank_at({2}), ConfigError);
    EXPECT_THROW(mesh.coordinates(2), ConfigError);
  });
}

}  // namespace
}  // namespace cohort
