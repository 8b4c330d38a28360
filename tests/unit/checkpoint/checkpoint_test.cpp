// Checkpointer: exact resume (sync and async; SGD, Adam, AdamW), fallback over corrupt
// checkpoints, a different world size mid-epoch, retention, failures that training survives, and
// the errors for checkpoints that do not fit. Ranks are threads (thread_ranks.h); the tests with
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

namespace fs = std::filesystem;
using namespace cohort;
using namespace cohort::testing;

namespace {

// Every directory fresh_dir made, removed when the test program ends: some hold a FIFO named
// manifest.json (CheckpointCorruption), which blocks whatever reads /tmp later (a grep -r did).
std::vector<fs::path>& made_dirs() {
  static std::vector<fs::path> dirs;
  return dirs;
}
class RemoveMadeDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    for (const auto& d : made_dirs()) fs::remove_all(d, ignored);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveMadeDirs = ::testing::AddGlobalTestEnvironment(new RemoveMadeDirs);

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("cohort_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  made_dirs().push_back(p);
  return p.string();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params) {
  if (kind == "sgd") return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  if (kind == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
}

// What a resumed run must reproduce bit for bit: parameters and optimizer state tensors.
std::vector<torch::Tensor> full_state(torch::nn::Module& module, torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters()) out.push_back(p.detach().clone());
  std::string description;
  for (auto& [name, t] : ckpt::optimizer_tensors(opt, module, &description, 0)) out.push_back(t.clone());
  return out;
}

void expect_bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i << " differs";
}

// A data-parallel SmallNet with its optimizer; rank r trains on its slice of each global batch.
struct Trainer {
  Trainer(std::shared_ptr<Context> ctx, const std::string& kind, const std::vector<torch::Tensor>& init, int hidden = 16)
      : rank(ctx->rank()), world(ctx->world_size()), model(make_model(ctx, init, hidden)),
        opt(make_optimizer(kind, model->parameters())) {}
  static DistributedDataParallel<SmallNet> make_model(std::shared_ptr<Context> ctx, const std::vector<torch::Tensor>& init,
                                                      int hidden) {
    SmallNet net(hidden);
    if (!init.empty()) load_parameters(*net, init);
    return DistributedDataParallel(net, ctx);
  }
  void step(const Batch& b) {
    const auto rows = b.x.size(0) / world;
    opt->zero_grad();
    torch::nll_loss(model->forward(b.x.narrow(0, rank * rows, rows)), b.y.narrow(0, rank * rows, rows)).backward();
    opt->step();
  }
  TrainingState state() { return {&*model, opt.get(), nullptr}; }
  int rank, world;
  DistributedDataParallel<SmallNet> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
};

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
               "optimizer group"}),
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

// --- retention: the newest K plus every M-th; leftovers of interrupted saves go too ---

TEST(CheckpointRetention, KeepsTheNewestAndThePermanentOnes) {
  const std::string dir = fresh_dir("retention");
  fs::create_directories(fs::path(dir) / "step-00000003");  // an interrupted save's leftovers
  const auto batches = make_batches(1, 8);
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.every_steps = 1, .keep_last = 2, .keep_every_steps = 5, .async = true});
    for (int s = 0; s < 12; ++s) {
      t.step(batches[0]);
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
  });
  std::set<int64_t> steps;
  for (const auto& c : ckpt::list_checkpoints(dir)) {
    EXPECT_TRUE(c.manifest.has_value()) << c.path << ": " << c.problem;
    steps.insert(c.step);
  }
  EXPECT_EQ(steps, (std::set<int64_t>{5, 10, 11, 12}));
}

// --- time-based and skip policies: every rank saves at the same steps ---

TEST(CheckpointPolicy, EverySecondsSavesAtTheSameStepOnEveryRank) {
  const std::string dir = fresh_dir("every_seconds");
  const auto batches = make_batches(1, 8);
  std::vector<int64_t> committed(2);
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    // Rank 1's steps take longer than rank 0's: their clocks see different times at each step.
    Checkpointer checkpoints(dir, ctx,
                             {.every_seconds = 0.1, .keep_last = 0, .commit_timeout = std::chrono::seconds(5)});
    for (int s = 0; s < 12; ++s) {
      t.step(batches[0]);
      std::this_thread::sleep_for(std::chrono::milliseconds(ctx->rank() == 0 ? 30 : 45));
      checkpoints.maybe_save(t.state());
    }
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
    committed[ctx->rank()] = checkpoints.saves_committed();
  });
  const auto listed = ckpt::list_checkpoints(dir);
  EXPECT_GE(listed.size(), 2u);  // 12 steps of >= 30 ms with a save due every 100 ms
  EXPECT_EQ(committed[0], static_cast<int64_t>(listed.size()));
  for (const auto& c : listed) EXPECT_EQ(ckpt::verify_checkpoint(c.path), "") << c.path;
}

TEST(CheckpointPolicy, SkipWhenBusyIsDecidedTogether) {
  const std::string dir = fresh_dir("skip");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    // 64 MB of parameters, fsynced at every step, and steps that take no time: most saves find the
    // previous one still being written and are skipped — by both ranks, or the commit would fail.
    struct Big : torch::nn::Module {
      Big() { register_parameter("w", torch::zeros({16 << 20})); }
    } big;
    torch::optim::SGD sgd(big.parameters(), torch::optim::SGDOptions(0.1));
    Checkpointer checkpoints(dir, ctx,
                             {.every_steps = 1,
                              .keep_last = 1,
                              .when_busy = CheckpointOptions::WhenBusy::skip,
                              .commit_timeout = std::chrono::seconds(20)});
    int started = 0;
    for (int s = 0; s < 20; ++s) started += checkpoints.maybe_save({&big, &sgd, nullptr});
    checkpoints.wait();
    EXPECT_EQ(checkpoints.last_error(), "");
    EXPECT_LT(started, 20);
    EXPECT_GE(started, 1);
    if (ctx->rank() == 0) EXPECT_EQ(checkpoints.saves_committed(), started);
  });
  for (const auto& c : ckpt::list_checkpoints(dir)) EXPECT_EQ(ckpt::verify_checkpoint(c.path), "") << c.path;
}

// --- failures: a failed save is reported, leaves nothing visible, and training carries on ---

TEST(CheckpointFailure, FailedBackgroundSaveIsReportedAtTheNextCall) {
  const std::string dir = fresh_dir("blocked");
  std::ofstream(dir) << "a file where the checkpoint directory should be";
  const auto batches = make_batches(1, 8);
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.every_steps = 1});
    t.step(batches[0]);
    checkpoints.save_async(t.state());  // the snapshot succeeds; writing fails in the background
    try {
      checkpoints.wait();
      ADD_FAILURE() << "wait() should rethrow the background failure";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("could not create directory " + dir), std::string::npos) << e.what();
    }
    // maybe_save never throws: this save fails in the background too, the next call reports it
    // (a warning in the log, last_error()) and training carries on.
    t.step(batches[0]);
    checkpoints.maybe_save(t.state());
    t.step(batches[0]);
    EXPECT_NO_THROW(checkpoints.maybe_save(t.state()));
    EXPECT_NE(checkpoints.last_error().find("could not create directory"), std::string::npos) << checkpoints.last_error();
  });
  fs::remove(dir);
}

TEST(CheckpointFailure, ARankThatNeverReportsIsATimeoutNotAHang) {
  const std::string dir = fresh_dir("timeout");
  const auto batches = make_batches(1, 8);
  auto errors = run_ranks_collect(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx, {.async = false, .commit_timeout = std::chrono::milliseconds(500)});
    if (ctx->rank() == 0) checkpoints.save(t.state());  // rank 1 never saves
  });
  ASSERT_TRUE(errors[0]);
  try {
    std::rethrow_exception(errors[0]);
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 did not report"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ckpt::list_checkpoints(dir).at(0).manifest.has_value());
}

// --- checkpoints that do not fit are clear errors ---

TEST(CheckpointMismatch, OtherModelOrOptimizerIsAClearError) {
  const std::string dir = fresh_dir("mismatch");
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "adam", initial_parameters(1));
    t.step(make_batches(1, 8)[0]);
    Checkpointer(dir, ctx, {.async = false}).save(t.state());
  });
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer wider(ctx, "adam", {}, /*hidden=*/32);
    Checkpointer checkpoints(dir, ctx);
    try {
      checkpoints.restore_latest(wider.state());
      ADD_FAILURE() << "restoring into another model must fail";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("tensor \"module.fc1.weight\" is Float[16, 8] in the checkpoint but Float[32, 8]"),
                std::string::npos)
          << e.what();
    }
    Trainer sgd(ctx, "sgd", initial_parameters(1));
    try {
      checkpoints.restore_latest(sgd.state());
      ADD_FAILURE() << "restoring Adam state into SGD must fail";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("holds Adam optimizer state but the optimizer is SGD"), std::string::npos)
          << e.what();
    }
    torch::optim::LBFGS lbfgs(sgd.model->parameters(), torch::optim::LBFGSOptions(1));
    EXPECT_THROW(checkpoints.save({&*sgd.model, &lbfgs, nullptr}), CheckpointError);
  });
}

TEST(CheckpointFailure, MissingParentDirectoriesAreCreated) {
  const std::string dir = fresh_dir("nested") + "/runs/job/checkpoints";  // none of it exists yet
  run_ranks(1, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer(dir, ctx, {.async = false}).save(t.state());
  });
  EXPECT_EQ(ckpt::verify_checkpoint(dir + "/step-00000000"), "");
}

TEST(CheckpointMismatch, NoCheckpointIsAFreshStart) {
  const std::string dir = fresh_dir("empty");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    Trainer t(ctx, "sgd", initial_parameters(1));
    Checkpointer checkpoints(dir, ctx);
    EXPECT_FALSE(checkpoints.restore_latest(t.state()).has_value());
    EXPECT_EQ(checkpoints.step(), 0);
  });
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
