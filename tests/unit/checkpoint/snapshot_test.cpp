// In-memory snapshots (CheckpointOptions::snapshot_every_steps, issue 19): the newest two kept,
// restore taking the newest of snapshots and checkpoints bitwise, a snapshot torn by a kill during
// its copy or corrupted afterwards skipped for the one before (never trained on), newer snapshots
// dropped when a restore goes back further, the replicated files split between ranks 0 and 1 and
// written in place, and no snapshots where they cannot work. Ranks are threads (thread_ranks.h);
// the kills of real workers are in tests/integration/recovery_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/storage/checkpoint_dir.h"
#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/error.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

constexpr int kWorld = 2;

fs::path fresh(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cohort_snapshot_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// A DDP SmallNet with SGD; rank r trains on its slice of each global batch.
struct SnapshotTrainer {
  explicit SnapshotTrainer(std::shared_ptr<Context> ctx)
      : rank(ctx->rank()), world(ctx->world_size()), model(make_model(ctx)),
        opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)) {}
  static DistributedDataParallel<SmallNet> make_model(std::shared_ptr<Context> ctx) {
    SmallNet net;
    load_parameters(*net, initial_parameters(7));
    return DistributedDataParallel(net, ctx);
  }
  void step(const Batch& b) {
    const auto rows = b.x.size(0) / world;
    opt.zero_grad();
    torch::nll_loss(model->forward(b.x.narrow(0, rank * rows, rows)), b.y.narrow(0, rank * rows, rows)).backward();
    opt.step();
  }
  TrainingState state() { return {&*model, &opt, nullptr}; }
  int rank, world;
  DistributedDataParallel<SmallNet> model;
  torch::optim::SGD opt;
};

// The snapshot directory's steps (committed ones only) and whether any is left uncommitted.
std::set<int64_t> committed_steps(const fs::path& snapshot_root) {
  std::set<int64_t> out;
  for (const auto& sub : fs::directory_iterator(snapshot_root))  // the one ckpt-<hash> directory
    for (const auto& c : ckpt::list_checkpoints(sub.path().string()))
      if (c.manifest) out.insert(c.step);
  return out;
}

fs::path snapshot_step(const fs::path& snapshot_root, int64_t step) {
  for (const auto& sub : fs::directory_iterator(snapshot_root))
    for (const auto& c : ckpt::list_checkpoints(sub.path().string()))
      if (c.step == step) return c.path;
  return {};
}

const RankOptions kOneMachine{.same_machine = true};

// Trains 6 steps with a checkpoint on disk every 4 and a snapshot every step; returns the
// parameters after each step (rank 0's; DDP keeps the ranks equal).
std::vector<std::vector<torch::Tensor>> train_six(const fs::path& disk, const fs::path& memory) {
  const auto batches = make_batches(6, 8);
  std::vector<std::vector<torch::Tensor>> after(7);
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx,
                             {.every_steps = 4, .snapshot_every_steps = 1, .snapshot_dir = memory.string()});
    for (int s = 0; s < 6; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(t.state());
      if (t.rank == 0) after[s + 1] = snapshot(*t.model);
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
  }, kOneMachine);
  return after;
}

// A new job's restore: the step and source it took, and its parameters.
struct Restored {
  int64_t step = -1;
  bool from_snapshot = false;
  std::vector<torch::Tensor> params;
};
Restored restore(const fs::path& disk, const fs::path& memory) {
  Restored out;
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, {.every_steps = 4, .snapshot_every_steps = 1, .snapshot_dir = memory.string()});
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(checkpoints.step(), info->step);
    if (t.rank == 0) out = {info->step, info->from_snapshot, snapshot(*t.model)};
  }, kOneMachine);
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " differs";
}

TEST(Snapshots, TheNewestTwoAreKeptAndRestoreTakesTheNewestBitwise) {
  const fs::path disk = fresh("disk"), memory = fresh("memory");
  const auto after = train_six(disk, memory);
  // Step 4 went to disk (and to a snapshot: the disk save commits in the background); 5 and 6 are
  // the snapshots kept, older ones retired.
  EXPECT_EQ(committed_steps(memory), (std::set<int64_t>{5, 6}));
  std::set<int64_t> on_disk;
  for (const auto& c : ckpt::list_checkpoints(disk.string())) on_disk.insert(c.step);
  EXPECT_EQ(on_disk, (std::set<int64_t>{4}));

  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 6);
  EXPECT_TRUE(r.from_snapshot);
  expect_equal(r.params, after[6]);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(Snapshots, ATornOrCorruptSnapshotIsSkippedForTheNextSafestSource) {
  const fs::path disk = fresh("disk_torn"), memory = fresh("memory_torn");
  const auto after = train_six(disk, memory);
  // A kill during the copy of step 6: its files are there, its manifest (the commit) is not.
  fs::remove(snapshot_step(memory, 6) / "manifest.json");
  Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 5);
  EXPECT_TRUE(r.from_snapshot);
  expect_equal(r.params, after[5]);
  // Step 5's model bytes changed after the commit: the checksum rules it out; disk's 4 is next.
  {
    std::fstream f(snapshot_step(memory, 5) / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.put('\x7f');
  }
  r = restore(disk, memory);
  EXPECT_EQ(r.step, 4);
  EXPECT_FALSE(r.from_snapshot);
  expect_equal(r.params, after[4]);
  // Back at 4, the snapshots of 5 and 6 belong to a history the job no longer has.
  EXPECT_TRUE(committed_steps(memory).empty());
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// A snapshot overwrites the files of the one it retired in place (on tmpfs their pages are the
// storage: then no page is allocated, zeroed and freed per step), and the files waiting for that
// are never a snapshot. On tmpfs, where a new file always gets a new inode number, an inode that
// comes back three steps later is a file written again in place.
TEST(Snapshots, TheRetiredFilesAreOverwrittenInPlaceByTheNextOnes) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm (tmpfs) on this machine";
  const fs::path disk = fresh("reuse_disk");
  const fs::path memory = fs::path("/dev/shm") / ("cohort_snapshot_reuse_" + std::to_string(::getpid()));
  fs::remove_all(memory);
  const auto batches = make_batches(8, 8);
  std::vector<std::pair<ino_t, ino_t>> files;  // the newest committed snapshot's model and optimizer
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = 1, .snapshot_dir = memory.string()});
    for (int s = 0; s < 8; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(t.state());  // waits for the previous step's snapshot: committed now
      if (t.rank != 0 || s == 0) continue;
      const fs::path newest = snapshot_step(memory, s);
      struct stat model {}, optimizer {};
      ASSERT_EQ(::stat((newest / "model.safetensors").c_str(), &model), 0) << newest;
      ASSERT_EQ(::stat((newest / "optimizer.safetensors").c_str(), &optimizer), 0) << newest;
      files.emplace_back(model.st_ino, optimizer.st_ino);
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
  }, kOneMachine);
  ASSERT_EQ(files.size(), 7u);  // steps 1..7
  for (size_t k = 3; k < files.size(); ++k) {
    EXPECT_EQ(files[k].first, files[k - 3].first) << "step " << k + 1 << "'s model file is not step " << k - 2 << "'s";
    EXPECT_EQ(files[k].second, files[k - 3].second) << "step " << k + 1 << "'s optimizer file";
  }
  EXPECT_NE(files[1].first, files[0].first);
  EXPECT_EQ(committed_steps(memory), (std::set<int64_t>{7, 8}));  // the waiting files are no step
  // On one machine the replicated files are split: rank 0 writes the model, rank 1 the optimizer
  // state, and each waits in the spare directory of the rank that writes it next.
  std::string problem;
  const auto manifest = ckpt::read_manifest(snapshot_step(memory, 8).string(), &problem);
  ASSERT_TRUE(manifest.has_value()) << problem;
  std::map<std::string, int> writer;
  for (const auto& f : manifest->files) writer[f.role] = f.rank;
  EXPECT_EQ(writer, (std::map<std::string, int>{{"model", 0}, {"optimizer", 1}}));
  const fs::path job_dir = snapshot_step(memory, 8).parent_path();
  EXPECT_TRUE(fs::is_regular_file(job_dir / ".spare-0" / "model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(job_dir / ".spare-1" / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(job_dir / ".spare-0" / "optimizer.safetensors"));
  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 8);
  EXPECT_TRUE(r.from_snapshot);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// Split, the snapshot needs rank 1's optimizer state: a rank 1 whose training state has no
// optimizer (rank 0's has one) fails each snapshot with the reason, and none is committed that no
// restore would take.
TEST(Snapshots, ARankOneWithoutRankZerosOptimizerFailsTheSnapshotsWithTheReason) {
  const fs::path disk = fresh("disk_no_optimizer"), memory = fresh("memory_no_optimizer");
  const auto batches = make_batches(3, 8);
  ::testing::internal::CaptureStderr();
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = 1, .snapshot_dir = memory.string()});
    TrainingState state = t.state();
    if (t.rank == 1) state.optimizer = nullptr;
    for (int s = 0; s < 3; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(state);
    }
    checkpoints.wait();
  }, kOneMachine);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("not committed: rank 1 wrote no optimizer state, rank 0 has an optimizer"), std::string::npos) << err;
  EXPECT_TRUE(committed_steps(memory).empty());
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(Snapshots, AtTheSameStepTheCheckpointOnDiskIsTaken) {
  const fs::path disk = fresh("disk_same"), memory = fresh("memory_same");
  const auto after = train_six(disk, memory);
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {  // the end-of-job save of step 6, as the examples do
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = 1, .snapshot_dir = memory.string()});
    checkpoints.restore_latest(t.state());
    checkpoints.save(t.state());
  }, kOneMachine);
  const Restored r = restore(disk, memory);
  EXPECT_EQ(r.step, 6);
  EXPECT_FALSE(r.from_snapshot);
  expect_equal(r.params, after[6]);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

// A replacement of another program version (issue 19): each snapshot names the program that wrote
// it (COHORT_PROGRAM_VERSION, else the executable's hash); a job running another one skips the
// snapshots, saying whose they are, for the checkpoint on disk — never their state.
TEST(Snapshots, AnotherProgramVersionSkipsTheSnapshotsForTheDisk) {
  const fs::path disk = fresh("disk_version"), memory = fresh("memory_version");
  ::setenv("COHORT_PROGRAM_VERSION", "build-1", 1);
  const auto after = train_six(disk, memory);
  ::setenv("COHORT_PROGRAM_VERSION", "build-2", 1);
  ::testing::internal::CaptureStderr();
  const Restored r = restore(disk, memory);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.step, 4);
  EXPECT_FALSE(r.from_snapshot);
  expect_equal(r.params, after[4]);
  EXPECT_NE(err.find("written by another program version (build-1; this rank runs build-2)"), std::string::npos) << err;
  // The same program (the test binary's own hash, no label) takes the snapshots as before.
  ::unsetenv("COHORT_PROGRAM_VERSION");
  const fs::path disk2 = fresh("disk_version2"), memory2 = fresh("memory_version2");
  const auto after2 = train_six(disk2, memory2);
  const Restored same = restore(disk2, memory2);
  EXPECT_EQ(same.step, 6);
  EXPECT_TRUE(same.from_snapshot);
  expect_equal(same.params, after2[6]);
  for (const auto& d : {disk, memory, disk2, memory2}) fs::remove_all(d);
}

// The label is a version, not a payload: one line naming the variable when it is not one.
TEST(Snapshots, AnOverlongProgramVersionIsAConfigErrorNamingIt) {
  const fs::path disk = fresh("disk_label"), memory = fresh("memory_label");
  ::setenv("COHORT_PROGRAM_VERSION", std::string(201, 'v').c_str(), 1);
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    try {
      Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = 1, .snapshot_dir = memory.string()});
      ADD_FAILURE() << "a 201-character label was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("COHORT_PROGRAM_VERSION is 201 characters long"), std::string::npos) << e.what();
    }
  });
  ::unsetenv("COHORT_PROGRAM_VERSION");
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(Snapshots, NoneWithoutADirectoryAndNegativeIsAnError) {
  const fs::path disk = fresh("disk_none");
  ::unsetenv("COHORT_SNAPSHOT_DIR");
  const auto batches = make_batches(2, 8);
  run_ranks(kWorld, [&](std::shared_ptr<Context> ctx) {  // no directory: a note, training goes on
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = 1});
    for (const auto& b : batches) {
      t.step(b);
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
  }, kOneMachine);
  EXPECT_FALSE(fs::exists(disk)) << "no checkpoint was due";
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    try {
      Checkpointer checkpoints(disk.string(), ctx, {.snapshot_every_steps = -1});
      ADD_FAILURE() << "a negative interval was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("snapshot_every_steps"), std::string::npos) << e.what();
    }
  });
}

// --- several machines: each keeps a whole copy, and one that lost its copy gets the newest ---

constexpr int kMachines = 2, kPerMachine = 2, kWorld4 = kMachines * kPerMachine;

// Each machine's memory: its own snapshot directory.
fs::path machine_memory(const fs::path& base, int rank) { return base / ("machine" + std::to_string(rank / kPerMachine)); }

CheckpointOptions four_rank_options(const fs::path& memory, int rank) {
  return {.every_steps = 4, .snapshot_every_steps = 1, .snapshot_dir = machine_memory(memory, rank).string()};
}

const RankOptions kTwoMachines{.ranks_per_node = kPerMachine};

std::vector<std::vector<torch::Tensor>> train_six_on_two_machines(const fs::path& disk, const fs::path& memory) {
  const auto batches = make_batches(6, 8);
  std::vector<std::vector<torch::Tensor>> after(7);
  run_ranks(kWorld4, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, four_rank_options(memory, ctx->rank()));
    for (int s = 0; s < 6; ++s) {
      t.step(batches[s]);
      checkpoints.maybe_save(t.state());
      if (t.rank == 0) after[s + 1] = snapshot(*t.model);
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
  }, kTwoMachines);
  return after;
}

Restored restore_on_two_machines(const fs::path& disk, const fs::path& memory) {
  std::vector<Restored> by_rank(kWorld4);
  run_ranks(kWorld4, [&](std::shared_ptr<Context> ctx) {
    SnapshotTrainer t(ctx);
    Checkpointer checkpoints(disk.string(), ctx, four_rank_options(memory, ctx->rank()));
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    by_rank[t.rank] = {info->step, info->from_snapshot, snapshot(*t.model)};
  }, kTwoMachines);
  for (int r = 1; r < kWorld4; ++r) {  // every rank restored the same, whichever machine's copy it read
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(by_rank[r].step, by_rank[0].step);
    expect_equal(by_rank[r].params, by_rank[0].params);
  }
  return by_rank[0];
}

TEST(SnapshotsOnSeveralMachines, EachMachineKeepsAWholeCopy) {
  const fs::path disk = fresh("disk_two"), memory = fresh("memory_two");
  train_six_on_two_machines(disk, memory);
  for (int m = 0; m < kMachines; ++m) {
    SCOPED_TRACE("machine " + std::to_string(m));
    const fs::path mine = machine_memory(memory, m * kPerMachine);
    EXPECT_EQ(committed_steps(mine), (std::set<int64_t>{5, 6}));
    const fs::path six = snapshot_step(mine, 6);
    EXPECT_EQ(ckpt::verify_checkpoint(six.string()), "") << "a whole, valid copy on every machine";
  }
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(SnapshotsOnSeveralMachines, AMachineThatLostItsMemoryGetsTheNewestFromAnother) {
  const fs::path disk = fresh("disk_lost"), memory = fresh("memory_lost");
  const auto after = train_six_on_two_machines(disk, memory);
  fs::remove_all(machine_memory(memory, kPerMachine));  // machine 1 replaced: its memory is empty
  const Restored r = restore_on_two_machines(disk, memory);
  EXPECT_EQ(r.step, 6);
  EXPECT_TRUE(r.from_snapshot);
  expect_equal(r.params, after[6]);
  EXPECT_EQ(committed_steps(machine_memory(memory, kPerMachine)), (std::set<int64_t>{6})) << "sent, checked, written";
  fs::remove_all(disk);
  fs::remove_all(memory);
}

TEST(SnapshotsOnSeveralMachines, ACopyDamagedOnTheWayIsNotUsedAndTheRestoreTakesWhatAllHave) {
  const fs::path disk = fresh("disk_damaged"), memory = fresh("memory_damaged");
  const auto after = train_six_on_two_machines(disk, memory);
  fs::remove_all(machine_memory(memory, kPerMachine));
  ::setenv("COHORT_TEST_DAMAGE_BLOB", "snapshot-sent", 1);
  const Restored r = restore_on_two_machines(disk, memory);
  ::unsetenv("COHORT_TEST_DAMAGE_BLOB");
  EXPECT_EQ(r.step, 4) << "machine 1 has only the checkpoint on disk";
  EXPECT_FALSE(r.from_snapshot);
  expect_equal(r.params, after[4]);
  fs::remove_all(disk);
  fs::remove_all(memory);
}

}  // namespace
