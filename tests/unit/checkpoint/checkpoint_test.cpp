// Checkpointer: exact resume (sync and async; SGD, Adam, AdamW), fallback over corrupt
// checkpoints, a different world size mid-epoch, the reader, user state (retention, policies,
// failures and mismatches are checkpoint_policy_test.cpp's). Ranks are threads (thread_ranks.h); the tests with
// processes, signals and a full disk are in tests/integration/checkpoint_*_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>  // mkfifo

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/format/training_state.h"
#include "cohort/checkpointer.h"
#include "cohort/distributed_data_parallel.h"
#include "cohort/distributed_sampler.h"
#include "cohort/error.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"
#include "checkpoint_fixtures.h"

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

using namespace checkpoint_test;

struct ResumeCase {
  std::string optimizer;
  bool async;
};

void PrintTo(const ResumeCase& c, std::ostream* os) { *os << c.optimizer << (c.async ? " async" : " sync"); }

class CheckpointResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(CheckpointResume, BitwiseEqualToUninterruptedTraining) {
  const ResumeCase c = GetParam();
  const int world = 2, n = 4;
  const auto batches = make_batches(2 * n, 8);
  const auto init = initial_parameters(7);
  const std::string dir = fresh_dir("resume_" + c.optimizer + (c.async ? "_async" : "_sync"));
  std::vector<std::vector<torch::Tensor>> straight(world), resumed(world);

  // 2N steps in one go, checkpointing after step N (which must not disturb training either).
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, c.optimizer, init);
    Checkpointer checkpoints(dir, ctx, {.every_steps = n, .async = c.async});
    for (int s = 0; s < 2 * n; ++s) {
      t.step(batches[s]);
      if (s < n) checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    straight[ctx->rank()] = full_state(*t.model, *t.opt);
  });
  ASSERT_EQ(ckpt::verify_checkpoint(dir + "/step-00000004"), "");

  // A new job: fresh model (other initial values) and optimizer, restore, N more steps.
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, c.optimizer, initial_parameters(99));
    Checkpointer checkpoints(dir, ctx);
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->step, n);
    EXPECT_EQ(checkpoints.step(), n);
    EXPECT_EQ(info->saved_world_size, world);
    for (int s = n; s < 2 * n; ++s) t.step(batches[s]);
    resumed[ctx->rank()] = full_state(*t.model, *t.opt);
  });
  for (int r = 0; r < world; ++r) expect_bitwise_equal(straight[r], resumed[r]);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointResume,
                         ::testing::Values(ResumeCase{"sgd", false}, ResumeCase{"sgd", true}, ResumeCase{"adam", false},
                                           ResumeCase{"adam", true}, ResumeCase{"adamw", true}),
                         [](const auto& info) { return info.param.optimizer + (info.param.async ? "_async" : "_sync"); });

// --- corruption: verify names the problem, restore falls back to the previous good checkpoint ---

struct Damage {
  std::string name;
  std::function<void(const fs::path&)> apply;
  std::string expected;  // part of verify's message
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class CheckpointCorruption : public ::testing::TestWithParam<Damage> {};

TEST_P(CheckpointCorruption, VerifyNamesItAndRestoreFallsBack) {
  const Damage& d = GetParam();
  const std::string dir = fresh_dir("corrupt_" + d.name);
  const auto batches = make_batches(2, 8);
  std::vector<torch::Tensor> at_step1;
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adam", initial_parameters(3));
    Checkpointer checkpoints(dir, ctx, {.every_steps = 1, .async = false});
    t.step(batches[0]);
    checkpoints.maybe_save(t.state());
    at_step1 = full_state(*t.model, *t.opt);
    t.step(batches[1]);
    checkpoints.maybe_save(t.state());
  });
  const fs::path newest = fs::path(dir) / "step-00000002";
  ASSERT_EQ(ckpt::verify_checkpoint(newest), "");
  d.apply(newest);
  const std::string problem = ckpt::verify_checkpoint(newest);
  EXPECT_NE(problem.find(d.expected), std::string::npos) << problem;
  EXPECT_EQ(ckpt::verify_checkpoint((fs::path(dir) / "step-00000001").string()), "");

  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adam", initial_parameters(4));
    Checkpointer checkpoints(dir, ctx);
    const auto info = checkpoints.restore_latest(t.state());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->step, 1);
    expect_bitwise_equal(at_step1, full_state(*t.model, *t.opt));
  });
}

void flip_byte(const fs::path& file, std::streamoff from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(c ^ 0x10));
}

// Rewrites the checkpoint's manifest.json through `edit` (the hostile cases of issue 22).
void edit_manifest(const fs::path& checkpoint, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json m;
  std::ifstream(checkpoint / "manifest.json") >> m;
  edit(m);
  std::ofstream(checkpoint / "manifest.json", std::ios::trunc) << m.dump();
}

// The manifest with 100,000 nested arrays for its "sampler", written as text: nlohmann could not
// dump it (its dump recurses once a level).
void write_deep_sampler(const fs::path& manifest) {
  nlohmann::json m;
  std::ifstream(manifest) >> m;
  m["sampler"] = "DEEP";
  std::string text = m.dump();
  text.replace(text.find("\"DEEP\""), 6, "{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  std::ofstream(manifest, std::ios::trunc) << text;
}

INSTANTIATE_TEST_SUITE_P(
    Damages, CheckpointCorruption,
    ::testing::Values(
        Damage{"flipped_byte", [](const fs::path& p) { flip_byte(p / "model.safetensors", 5); },
               "model.safetensors: checksum mismatch"},
        Damage{"truncated",
               [](const fs::path& p) {
                 fs::resize_file(p / "optimizer.safetensors", fs::file_size(p / "optimizer.safetensors") - 100);
               },
               "optimizer.safetensors: has"},
        Damage{"missing_file", [](const fs::path& p) { fs::remove(p / "model.safetensors"); },
               "model.safetensors: missing"},
        Damage{"manifest_not_json", [](const fs::path& p) { std::ofstream(p / "manifest.json") << "{\"step\": 2, "; },
               "manifest.json is not JSON"},
        Damage{"no_manifest", [](const fs::path& p) { fs::remove(p / "manifest.json"); }, "no manifest.json"},
        // Issue 22: a manifest that lies, files that are not files, states that do not load.
        Damage{"no_files", [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["files"] = nlohmann::json::array(); }); },
               "lists 0 model files"},
        Damage{"no_model_entry", [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["files"].erase(0); }); },
               "model files"},
        Damage{"step_1e300", [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["step"] = 1e300; }); },
               "\"step\""},
        Damage{"manifest_fifo",
               [](const fs::path& p) {
                 fs::remove(p / "manifest.json");
                 ASSERT_EQ(mkfifo((p / "manifest.json").c_str(), 0600), 0);
               },
               "regular files only"},
        Damage{"manifest_dev_zero",
               [](const fs::path& p) {
                 fs::remove(p / "manifest.json");
                 fs::create_symlink("/dev/zero", p / "manifest.json");
               },
               "regular files only"},
        Damage{"model_symlink_out",  // the same bytes, outside the directory: still refused
               [](const fs::path& p) {
                 fs::rename(p / "model.safetensors", p.parent_path() / "elsewhere.safetensors");
                 fs::create_symlink(p.parent_path() / "elsewhere.safetensors", p / "model.safetensors");
               },
               "model.safetensors: not a regular file"},
        Damage{"rng_not_hex", [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["rng"][0]["cpu"] = "zz"; }); },
               "RNG state of rank 0 that is not hex"},
        Damage{"rng_wrong_size",  // parses; only restore, which knows the generator, refuses it
               [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["rng"][0]["cpu"] = "00ff"; }); }, ""},
        Damage{"sampler_wrong_kinds",  // also only restore (the sampler's own parser) refuses it
               [](const fs::path& p) {
                 edit_manifest(p, [](auto& m) {
                   m["sampler"] = {{"epoch", "x"}, {"consumed", 0}, {"dataset_size", 1}, {"seed", 1}, {"shuffle", true}};
                 });
               },
               ""},
        Damage{"optimizer_description_wrong_kinds",
               [](const fs::path& p) { edit_manifest(p, [](auto& m) { m["optimizer"]["groups"][0]["lr"] = "fast"; }); },
               "optimizer group"},
        // Issue 50: 100,000 nested arrays (200 KB) overflowed the stack of every rank's restore.
        Damage{"sampler_nested_100000_deep", [](const fs::path& p) { write_deep_sampler(p / "manifest.json"); },
               "manifest.json is nested deeper than 64 levels"}),
    [](const auto& info) { return info.param.name; });

// --- a different world size: save at 4 ranks mid-epoch, restore at 2, the epoch covered once ---

TEST(CheckpointWorldSize, SaveAtFourRestoreAtTwoCoversTheEpochExactlyOnce) {
  const size_t dataset = 120, batch = 5;
  const std::string dir = fresh_dir("world_change");
  std::mutex mutex;
  std::map<size_t, int> seen;
  auto record = [&](const std::vector<size_t>& indices) {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i : indices) ++seen[i];
  };
  run_ranks(4, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(5));
    DistributedSampler sampler(dataset, ctx, {.shuffle = true, .seed = 11});
    sampler.set_epoch(3);
    for (int b = 0; b < 2; ++b) record(*sampler.next(batch));  // 4 ranks x 2 batches x 5 = 40 samples
    Checkpointer checkpoints(dir, ctx, {.async = false});
    checkpoints.save({&*t.model, t.opt.get(), &sampler});
  });
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(6));
    DistributedSampler sampler(dataset, ctx, {.shuffle = true, .seed = 11});
    Checkpointer checkpoints(dir, ctx);
    const auto info = checkpoints.restore_latest({&*t.model, t.opt.get(), &sampler});
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->saved_world_size, 4);
    EXPECT_EQ(info->epoch, 3);
    EXPECT_EQ(sampler.epoch(), 3);
    sampler.set_epoch(sampler.epoch());  // what a training loop does: continues the epoch
    while (auto indices = sampler.next(batch)) record(*indices);
  });
  ASSERT_EQ(seen.size(), dataset);
  for (const auto& [index, count] : seen) EXPECT_EQ(count, 1) << "sample " << index;
}

}  // namespace

// The reader under the restore: tensors go straight into contiguous destinations of their dtype,
// through a temporary into any other; and bytes that change on disk after the file was verified
// are refused, not applied.
TEST(CheckpointReader, ReadsIntoAnyDestinationAndRefusesBytesChangedAfterVerification) {
  const std::string dir = fresh_dir("reader");
  fs::create_directories(dir);
  const auto a = torch::arange(12, torch::kFloat).reshape({3, 4});
  const auto b = torch::tensor({5}, torch::kLong);
  ckpt::ManifestFile expected;
  static_cast<ckpt::FileRecord&>(expected) = ckpt::write_tensor_file(dir, "t.safetensors", {{"a", a}, {"b", b}}, 0);
  ckpt::TensorFileReader reader(dir, expected, 0);
  ASSERT_NE(reader.find("a"), nullptr);
  EXPECT_EQ(reader.find("c"), nullptr);
  auto straight = torch::empty({3, 4});
  reader.read_into(*reader.find("a"), straight);
  EXPECT_TRUE(torch::equal(straight, a));
  auto strided = torch::zeros({4, 3}, torch::kDouble).t();  // non-contiguous, another dtype
  reader.read_into(*reader.find("a"), strided);
  EXPECT_TRUE(torch::equal(strided, a.to(torch::kDouble)));
  EXPECT_TRUE(torch::equal(reader.read(*reader.find("b")), b));

  // Another process rewrites one float of "a" in place (same size): the next read names it.
  {
    std::fstream f(dir + "/t.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-static_cast<std::streamoff>(b.nbytes() + 4), std::ios::end);
    const float other = 99.0f;
    f.write(reinterpret_cast<const char*>(&other), sizeof other);
  }
  try {
    reader.read_into(*reader.find("a"), straight);
    ADD_FAILURE() << "bytes changed after the verification were applied";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor \"a\" changed on disk between its verification and its restore"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(torch::equal(reader.read(*reader.find("b")), b)) << "the untouched tensor still reads";
  // And a reader made now refuses the whole file.
  EXPECT_THROW(ckpt::TensorFileReader(dir, expected, 0), CheckpointError);
  fs::remove_all(dir);
}

// Your own objects' state (cohort::Stateful): saved with every checkpoint, handed back by restore;
// a restore that asks for state the checkpoint lacks, or whose state does not load, names it.
struct Counter : Stateful {
  int64_t value = 0;
  bool refuse = false;
  std::string state_dict() const override { return std::to_string(value); }
  void load_state_dict(const std::string& s) override {
    if (refuse) throw std::runtime_error("not this one");
    value = std::stoll(s);
  }
};

TEST(CheckpointUserState, SavedRestoredAndRequired) {
  const std::string dir = fresh_dir("user_state");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adamw", initial_parameters(3));
    Counter schedule;
    schedule.value = 41 + ctx->rank();  // rank 0's is the one saved
    TrainingState s = t.state();
    s.user = {{"schedule", &schedule}};
    Checkpointer(dir, ctx, {.async = true}).save(s);
  });
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adamw", initial_parameters(4));
    Counter schedule, other, refusing;
    Checkpointer checkpoints(dir, ctx);
    TrainingState s = t.state();
    s.user = {{"schedule", &schedule}};
    ASSERT_TRUE(checkpoints.restore_latest(s).has_value());
    EXPECT_EQ(schedule.value, 41) << "rank " << ctx->rank();

    s.user = {{"schedule", &schedule}, {"other", &other}};
    try {
      checkpoints.restore_latest(s);
      ADD_FAILURE() << "a restore asking for state the checkpoint lacks must fail";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds no state for \"other\" (saved by a program without it)"), std::string::npos)
          << e.what();
    }
    refusing.refuse = true;
    s.user = {{"schedule", &refusing}};
    try {
      checkpoints.restore_latest(s);
      ADD_FAILURE() << "state that does not load must fail the restore";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("the state of \"schedule\" does not load: not this one"), std::string::npos)
          << e.what();
    }
  });
  const auto listed = ckpt::list_checkpoints(dir);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed.front().manifest->user.at("schedule"), "41");
}
