// In-memory snapshots of per-rank state on several machines (issue 19, buddy_copies.h): each rank's
// own files (here PowerSGD's error feedback and Qs) are kept on its machine and on its buddy's, so
// a machine that lost its memory gets them back, bitwise, from the buddy; losing both copies, or a
// copy damaged on the way, sends the restore to the disk. Four ranks as threads on two "machines"
// (thread_ranks.h), each machine with its own snapshot directory; and a ZeRO-3 model's shards.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>

#include "checkpoint/snapshots/buddy_copies.h"
#include "checkpoint/storage/checkpoint_dir.h"
#include "cohort/checkpointer.h"
#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "unit/sharded/sharded_fixtures.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

// Named: the unit tests build as one unity source, where the other snapshot tests' helpers share
// these names.
namespace snapshot_buddies {

constexpr int kMachines = 2, kPerMachine = 2, kWorld = kMachines * kPerMachine, kRows = 2;
const RankOptions kTwoMachines{.ranks_per_node = kPerMachine};

fs::path fresh(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cohort_buddies_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

fs::path machine_memory(const fs::path& base, int rank) { return base / ("machine" + std::to_string(rank / kPerMachine)); }

// The committed snapshot of `step` in one machine's memory (its one ckpt-<hash> directory).
fs::path snapshot_of(const fs::path& machine, int64_t step) {
  if (!fs::exists(machine)) return {};
  for (const auto& sub : fs::directory_iterator(machine))
    for (const auto& c : ckpt::list_checkpoints(sub.path().string()))
      if (c.step == step && c.manifest) return c.path;
  return {};
}

// One rank's DDP SmallNet with a PowerSGD hook (per-rank state from its first compressed step).
struct Trainer {
  explicit Trainer(std::shared_ptr<Context> ctx, int init_seed) : rank(ctx->rank()), hook(powersgd_hook(options())) {
    SmallNet net;
    load_parameters(*net, initial_parameters(init_seed));
    DDPOptions o;
    o.bucket_cap_mb = 0.004;
    o.comm_hook = hook;
    model.emplace(DistributedDataParallel(net, ctx, o));
    sgd.emplace((*model)->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  static PowerSGDOptions options() {
    PowerSGDOptions o;
    o.rank = 2;
    o.start_step = 2;
    o.seed = 11;
    return o;
  }
  void step(const Batch& b) {
    sgd->zero_grad();
    torch::nll_loss((*model)->forward(b.x.narrow(0, rank * kRows, kRows)), b.y.narrow(0, rank * kRows, kRows)).backward();
    sgd->step();
  }
  TrainingState state() { return {&**model, &*sgd, nullptr}; }
  std::vector<torch::Tensor> hook_tensors() const {
    std::vector<torch::Tensor> out;
    for (const auto& [name, t] : hook->state().tensors) out.push_back(t.clone());
    return out;
  }
  int rank;
  std::shared_ptr<CommHook> hook;
  std::optional<DistributedDataParallel<SmallNet>> model;
  std::optional<torch::optim::SGD> sgd;
};

CheckpointOptions options_for(const fs::path& memory, int rank) {
  return {.every_steps = 4, .snapshot_every_steps = 1, .snapshot_dir = machine_memory(memory, rank).string()};
}

struct AfterSix {
  std::vector<torch::Tensor> params;                    // rank 0's (DDP keeps them equal)
  std::vector<std::vector<torch::Tensor>> hook;         // each rank's own hook state
};

AfterSix train_six(const fs::path& disk, const fs::path& memory) {
  const auto batches = make_batches(6, kWorld * kRows, 5);
  AfterSix out;
  out.hook.resize(kWorld);
  std::mutex mu;
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, 3);
    Checkpointer checkpoints(disk.string(), ctx, options_for(memory, t.rank));
    for (int s = 0; s < 6; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    std::lock_guard<std::mutex> lock(mu);
    out.hook[t.rank] = t.hook_tensors();
    if (t.rank == 0) out.params = snapshot(*(*t.model)->module());
  }, kTwoMachines);
  return out;
}

struct Restored {
  int64_t step = -1;
  bool from_snapshot = false;
  std::vector<torch::Tensor> params;
  std::vector<std::vector<torch::Tensor>> hook;
};

Restored restore(const fs::path& disk, const fs::path& memory) {
  Restored out;
  out.hook.resize(kWorld);
  std::mutex mu;
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, 99);  // other parameters than trained: the restore must bring them
    Checkpointer checkpoints(disk.string(), ctx, options_for(memory, t.rank));
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    std::lock_guard<std::mutex> lock(mu);
    out.hook[t.rank] = t.hook_tensors();
    if (t.rank != 0) return;
    out.step = info->step;
    out.from_snapshot = info->from_snapshot;
    out.params = snapshot(*(*t.model)->module());
  }, kTwoMachines);
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " differs";
}

TEST(SnapshotBuddies, EachMachineKeepsItsOwnRanksFilesAndItsBuddiesAndAllVerify) {
  const fs::path disk = fresh("disk_kept"), memory = fresh("memory_kept");
  train_six(disk, memory);
  for (int m = 0; m < kMachines; ++m) {
    SCOPED_TRACE("machine " + std::to_string(m));
    const fs::path six = snapshot_of(machine_memory(memory, m * kPerMachine), 6);
    ASSERT_FALSE(six.empty()) << "the snapshot of step 6 was taken on a job of two machines with per-rank state";
    EXPECT_EQ(ckpt::verify_checkpoint(six.string()), "") << "every rank's file is here: its own or a buddy's copy";
    std::set<int> ranks;
    const auto listed = ckpt::list_checkpoints(six.parent_path().string());  // newest first
    ASSERT_TRUE(listed.front().manifest);
    for (const auto& f : listed.front().manifest->files)
      if (f.role == "rank_state" && fs::exists(six / f.name)) ranks.insert(f.rank);
    EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  }
  if (!std::getenv("KEEP")) fs::remove_all(disk);
  if (!std::getenv("KEEP")) fs::remove_all(memory);
}

TEST(SnapshotBuddies, AMachineThatLostItsMemoryGetsItsRanksStateBackFromTheBuddies) {
  const fs::path disk = fresh("disk_lost"), memory = fresh("memory_lost");
  const AfterSix after = train_six(disk, memory);
  fs::remove_all(machine_memory(memory, kPerMachine));  // machine 1 replaced: its memory is empty
  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 6);
  EXPECT_TRUE(r.from_snapshot);
  expect_equal(r.params, after.params);
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + "'s PowerSGD state");
    expect_equal(r.hook[rank], after.hook[rank]);
  }
  EXPECT_EQ(ckpt::verify_checkpoint(snapshot_of(machine_memory(memory, kPerMachine), 6).string()), "");
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(SnapshotBuddies, LosingARankAndItsBuddyTogetherFallsBackToTheDisk) {
  const fs::path disk = fresh("disk_both"), memory = fresh("memory_both");
  train_six(disk, memory);
  fs::remove_all(machine_memory(memory, 0));
  fs::remove_all(machine_memory(memory, kPerMachine));
  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 4) << "the checkpoint on disk";
  EXPECT_FALSE(r.from_snapshot);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(SnapshotBuddies, ACopyDamagedOnTheWayLeavesThatSnapshotUncommitted) {
  const fs::path disk = fresh("disk_damaged"), memory = fresh("memory_damaged");
  ::setenv("COHORT_TEST_DAMAGE_BLOB", "buddy-copy", 1);
  train_six(disk, memory);
  ::unsetenv("COHORT_TEST_DAMAGE_BLOB");
  for (int m = 0; m < kMachines; ++m)
    EXPECT_TRUE(snapshot_of(machine_memory(memory, m * kPerMachine), 6).empty()) << "machine " << m;
  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 4) << "no snapshot with per-rank state committed: the checkpoint on disk";
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// A ZeRO-3 model on `world` ranks, machines of `per_machine`: 3 steps with a snapshot each (no
// checkpoint on disk), or a restore; the full state afterwards (rank 0's gather).
struct ShardedRun {
  StateMap model, optimizer;
  int64_t step = -1;
  bool from_snapshot = false;
};
ShardedRun run_sharded(const fs::path& disk, const fs::path& memory, int world, int per_machine, bool restore) {
  const auto batches = make_batches(3, 12, 4);
  ShardedRun out;
  std::mutex mu;
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    const int r = ctx->rank();
    ShardedOptions options;
    options.level = ShardingLevel::parameters;
    options.unit_cap_mb = 0.0005;
    auto sharded = ShardedDataParallel(make_mlp(mlp_init(restore ? 5 : 21)), ctx, options);
    auto opt = make_optimizer(Opt::adam, sharded->parameters());
    const std::string mine = (memory / ("machine" + std::to_string(r / per_machine))).string();
    Checkpointer checkpoints(disk.string(), ctx, {.every_steps = 100, .snapshot_every_steps = 1, .snapshot_dir = mine});
    if (restore) {
      const auto info = checkpoints.restore_latest({&*sharded, opt.get(), nullptr});
      ASSERT_TRUE(info.has_value());
      std::lock_guard<std::mutex> lock(mu);
      out.step = info->step;
      out.from_snapshot = info->from_snapshot;
    } else {
      const int64_t rows = 12 / world;
      for (const auto& b : batches) {
        opt->zero_grad();
        torch::nll_loss(sharded->forward(b.x.narrow(0, r * rows, rows)), b.y.narrow(0, r * rows, rows)).backward();
        opt->step();
        checkpoints.maybe_save({&*sharded, opt.get(), nullptr});
      }
      checkpoints.wait();
    }
    auto full = sharded->full_state(opt.get());
    std::lock_guard<std::mutex> lock(mu);
    if (r == 0) out.model = to_map(full.model), out.optimizer = to_map(full.optimizer);
  }, {.ranks_per_node = per_machine});
  return out;
}

void expect_restored_from_memory(const ShardedRun& got, const ShardedRun& saved) {
  EXPECT_EQ(got.step, 3);
  EXPECT_TRUE(got.from_snapshot);
  expect_bitwise_equal(got.model, saved.model);
  expect_bitwise_equal(got.optimizer, saved.optimizer);
}

// Each rank's shard file comes back from its buddy: the state bitwise the saved one.
TEST(SnapshotBuddies, AShardedModelsShardsComeBackFromTheBuddies) {
  const fs::path disk = fresh("disk_sharded"), memory = fresh("memory_sharded");
  const ShardedRun saved = run_sharded(disk, memory, kWorld, kPerMachine, false);
  fs::remove_all(memory / "machine1");
  expect_restored_from_memory(run_sharded(disk, memory, kWorld, kPerMachine, true), saved);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// Elastic shrink: the surviving machine holds its own shards and its buddies' copies of the lost
// machine's, so the job on one machine reshards 4 shards onto 2 ranks from memory.
TEST(SnapshotBuddies, ShrinkingToTheSurvivingMachineReshardsFromItsCopies) {
  const fs::path disk = fresh("disk_shrink"), memory = fresh("memory_shrink");
  const ShardedRun saved = run_sharded(disk, memory, kWorld, kPerMachine, false);
  fs::remove_all(memory / "machine1");
  expect_restored_from_memory(run_sharded(disk, memory, kPerMachine, kPerMachine, true), saved);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// On one machine rank 0 retires every rank's files, each into the spare directory of the rank that
// writes it next (there the next snapshot overwrites it in place), and the state restores bitwise.
TEST(SnapshotBuddies, OnOneMachineEachRanksRetiredShardWaitsInItsOwnSpareDirectory) {
  const fs::path disk = fresh("disk_one_machine"), memory = fresh("memory_one_machine");
  const ShardedRun saved = run_sharded(disk, memory, 2, 2, false);  // 3 snapshots: step 1's retired
  fs::path job;
  for (const auto& sub : fs::directory_iterator(memory / "machine0")) job = sub.path();  // the one ckpt-<hash>
  for (int r = 0; r < 2; ++r) {
    const fs::path spare = job / (".spare-" + std::to_string(r));
    EXPECT_TRUE(fs::is_regular_file(spare / ("shard-0000" + std::to_string(r) + "-of-00002.safetensors"))) << spare;
  }
  EXPECT_FALSE(fs::exists(job / ".spare-1" / "model.safetensors")) << "rank 0's file";
  expect_restored_from_memory(run_sharded(disk, memory, 2, 2, true), saved);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// Three machines: none holds every shard (each its own and its buddy's), so at restore every
// machine gets what it lacks from the others, the replaced one included.
TEST(SnapshotBuddies, OnThreeMachinesEachGetsTheShardsItLacksFromTheOthers) {
  const fs::path disk = fresh("disk_three"), memory = fresh("memory_three");
  const ShardedRun saved = run_sharded(disk, memory, 3, 1, false);
  fs::remove_all(memory / "machine1");
  expect_restored_from_memory(run_sharded(disk, memory, 3, 1, true), saved);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// Sockets this process holds: Gloo's connections and listeners.
int open_sockets() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// The sockets each rank's buddies (make_buddies, a machine a rank) add to the process.
int buddy_sockets_per_rank(int world) {
  std::atomic<int> before{0}, after{0};
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    ctx->barrier();
    if (ctx->rank() == 0) before = open_sockets();
    ctx->barrier();
    ckpt::Buddies buddies = ckpt::make_buddies(*ctx);
    ctx->barrier();
    if (ctx->rank() == 0) after = open_sockets();
    ctx->barrier();
    EXPECT_TRUE(buddies.active()) << "rank " << ctx->rank();
  }, RankOptions{.ranks_per_node = 1});
  return (after - before) / world;
}

// Only ring neighbours exchange copies, so only they connect: as many sockets a rank at 8 ranks as
// at 4. One group of the whole job connected every pair: n - 1 connections a rank, thousands at
// thousands of ranks, each a file descriptor and a handshake at start and after every rejoin.
TEST(SnapshotBuddies, EachRankConnectsToItsRingNeighboursOnly) {
  const int at4 = buddy_sockets_per_rank(4), at8 = buddy_sockets_per_rank(8);
  EXPECT_EQ(at8, at4) << "sockets a rank for its buddies: " << at4 << " at 4 ranks, " << at8 << " at 8";
  EXPECT_LT(at8, 7) << "at 8 ranks, each rank connects to more than its two neighbours";
}

}  // namespace snapshot_buddies
