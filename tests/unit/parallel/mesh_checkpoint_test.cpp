// Checkpoints across device meshes (issue 47, item 5), ranks as threads: a model of the
// tensor-parallel layers (mesh_trainer.h) trained k steps at one mesh, saved, restored at the next,
// trained k more: (dp, tp, pp) = (2,1,1) -> (1,2,1) -> (1,1,2) -> (2,1,1). Each restore gives back
// the saved logical state — parameters, Adam's moments and step, the data's position — bit for bit;
// the whole run ends where a run that never stopped ends (bitwise without the tp leg; with it,
// within the bound tp's reduction order gives). Bad input is one line naming the parameter, the
// rank and the numbers; `cohort ckpt inspect` shows the mesh. A tied weight's copy on another stage
// is restored from the stage that saves it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <mutex>

#include "checkpoint/format/safetensors.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/error.h"
#include "mesh_trainer.h"
#include "support/files.h"
#include "support/subprocess.h"
#include "support/thread_ranks.h"

namespace cohort::testing::mesh {
namespace {

// The logical (un-split) state: "<name>" parameters, "<name>/<field>" Adam's state, whole.
using Logical = std::map<std::string, at::Tensor>;

// Places a rank's piece (flat elements [begin, begin + t.numel()) of its block) into the whole tensor.
void place(Logical& out, const std::string& key, const std::vector<int64_t>& shape, int tp_dim, int tp, int tp_size,
           int64_t begin, const at::Tensor& t) {
  at::Tensor& whole = out[key];
  if (!whole.defined()) whole = torch::zeros(shape, t.options());
  at::Tensor target = tp_dim >= 0 ? whole.narrow(tp_dim, tp * (shape[tp_dim] / tp_size), shape[tp_dim] / tp_size) : whole;
  at::Tensor piece = target.clone();
  piece.view(-1).slice(0, begin, begin + t.numel()).copy_(t.reshape(-1));
  target.copy_(piece);
}

// Every rank's parameters and optimizer state, gathered into the logical state (test side, by hand).
struct Gather {
  std::mutex mu;
  Logical state;
  void add(MeshTrainer& m) {
    std::lock_guard<std::mutex> lock(mu);
    const int tp = m.mesh().coordinate("tp"), tp_size = m.mesh().size("tp");
    for (const auto& p : m.params()) {
      place(state, p.name, p.shape, p.tp_dim, tp, tp_size, 0, p.local.detach());
      ckpt::NamedTensors fields;
      ckpt::param_state_tensors(*m.optimizer, p.shard, p.name, fields, m.mesh().rank());
      for (const auto& [key, t] : fields) {
        if (t.dim() == 0) state[key] = t.clone();
        else place(state, key, p.shape, p.tp_dim, tp, tp_size, p.begin, t.detach());
      }
    }
  }
};

struct Phase {
  MeshShape shape;
  int steps = 0;
  bool restore = false, save = false;
};
struct PhaseResult {
  Logical restored, end;
  int64_t next_batch = 0;
  std::vector<uint64_t> bytes_read;  // per rank, by the restore
};

PhaseResult run_phase(const std::string& dir, const Phase& ph, const FullWeights& w) {
  Gather restored, end;
  PhaseResult r;
  const int world = ph.shape.dp * ph.shape.tp * ph.shape.pp;
  r.bytes_read.assign(world, 0);
  std::mutex mu;
  run_ranks(world, [&](std::shared_ptr<Context> ctx) {
    MeshTrainer model(ctx, ph.shape, w);
    DataCursor cursor;
    CheckpointOptions options;
    options.async = false;
    Checkpointer checkpoints(dir, ctx, options);
    TrainingState state{&model, model.optimizer.get(), nullptr, {{"data", &cursor}}};
    if (ph.restore) {
      ckpt::mesh_bytes_read() = 0;
      ASSERT_TRUE(checkpoints.restore_latest(state).has_value());
      r.bytes_read[ctx->rank()] = ckpt::mesh_bytes_read();
      restored.add(model);
    }
    for (int i = 0; i < ph.steps; ++i) model.train_step(cursor.next++);
    if (ph.save) {
      checkpoints.set_step(cursor.next);
      if (ph.shape.tp == 2) {  // one leg saves in the background: the writer hashes the staged pieces
        checkpoints.save_async(state);
        checkpoints.wait();
      } else {
        checkpoints.save(state);
      }
    }
    end.add(model);
    std::lock_guard<std::mutex> lock(mu);
    r.next_batch = cursor.next;
  });
  r.restored = std::move(restored.state);
  r.end = std::move(end.state);
  return r;
}

void expect_bitwise(const Logical& got, const Logical& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << what << ": " << key;
    EXPECT_TRUE(torch::equal(got.at(key), t)) << what << ": " << key << " differs by "
                                              << (got.at(key).to(torch::kDouble) - t.to(torch::kDouble)).abs().max().item<double>();
  }
}

// The largest difference of any element, relative to the largest magnitude of its tensor.
double max_relative_difference(const Logical& got, const Logical& want) {
  double worst = 0;
  for (const auto& [key, t] : want) {
    const auto a = got.at(key).to(torch::kDouble), b = t.to(torch::kDouble);
    const double scale = std::max(b.abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (a - b).abs().max().item<double>() / scale);
  }
  return worst;
}

constexpr int kSteps = 3;

Logical never_stopped(const FullWeights& w, int phases) {
  TempDir dir("cohort_mesh_ref");
  return run_phase(dir.path(), {{2, 1, 1}, kSteps * phases, false, false}, w).end;
}

// The round trip. Each restore gives back exactly the state saved at the other mesh; a
// rank reads only the pieces its stage holds. Against the run that never stopped: tp's row-parallel
// layers sum their partial products over the tp ranks and the vocabulary-parallel cross-entropy
// sums exponentials across them, in another order than one matrix product, so the tp leg's steps
// differ in the last bits (float32: ~1e-7 relative per operation), and Adam carries that on: the
// bound asserted is 1e-5 of each tensor's largest magnitude (measured: 2.5e-7 after 12 steps, 3 of
// them at tp=2; the test prints it).
TEST(MeshCheckpoint, TheRoundTripAcrossMeshesContinuesLikeARunThatNeverStopped) {
  const FullWeights w = draw_weights();
  TempDir dir("cohort_mesh_ckpt");
  const std::vector<Phase> phases{{{2, 1, 1}, kSteps, false, true},
                                  {{1, 2, 1}, kSteps, true, true},
                                  {{1, 1, 2}, kSteps, true, true},
                                  {{2, 1, 1}, kSteps, true, false}};
  Logical saved;
  PhaseResult last;
  for (size_t i = 0; i < phases.size(); ++i) {
    last = run_phase(dir.path(), phases[i], w);
    if (i > 0) expect_bitwise(last.restored, saved, "restored at " + phases[i].shape.text());
    saved = last.end;
    if (phases[i].shape.pp == 2) {  // each stage's ranks read their own stage's pieces and no other
      ASSERT_EQ(last.bytes_read.size(), 2u);
      EXPECT_GT(last.bytes_read[0], 0u);
      EXPECT_GT(last.bytes_read[1], 0u);
      uint64_t data = 0;
      for (const auto& f : std::filesystem::directory_iterator(dir.path() + "/step-00000006"))
        if (f.path().filename().string().rfind("shard", 0) == 0) data += ckpt::read_header(f.path().string()).data_bytes;
      EXPECT_EQ(last.bytes_read[0] + last.bytes_read[1], data);
    }
  }
  EXPECT_EQ(last.next_batch, 4 * kSteps);  // the data's position came through every restore
  const Logical reference = never_stopped(w, 4);
  const double diff = max_relative_difference(last.end, reference);
  std::cout << "round trip with a tp leg against the run that never stopped: max relative difference " << diff << "\n";
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(diff, 0.0);  // the tp leg does reorder sums: were this 0, the test would not show the bound
}

// Without a tp leg nothing reorders a sum: dp's allreduce of two ranks adds the same two
// microbatches' gradients one process's accumulation adds, the pipeline runs the same layers on
// the same microbatches, ZeRO's Adam is elementwise. So the round trip is bitwise.
TEST(MeshCheckpoint, DataAndPipelineMeshesContinueBitwise) {
  const FullWeights w = draw_weights();
  TempDir dir("cohort_mesh_ckpt");
  run_phase(dir.path(), {{2, 1, 1}, kSteps, false, true}, w);
  run_phase(dir.path(), {{1, 1, 2}, kSteps, true, true}, w);
  const PhaseResult back = run_phase(dir.path(), {{2, 1, 1}, kSteps, true, false}, w);
  expect_bitwise(back.end, never_stopped(w, 3), "(2,1,1) -> (1,1,2) -> (2,1,1) against (2,1,1) throughout");
}

// A model on a mesh with one parameter "w" of a chosen shape and split (for the bad cases).
class OneParameter : public torch::nn::Module, public MeshCheckpointable {
 public:
  OneParameter(std::shared_ptr<Context> ctx, MeshShape s, std::string name, std::vector<int64_t> shape, int tp_dim,
               std::vector<int64_t> local)
      : mesh_(ctx, {{"pp", s.pp}, {"dp", s.dp}, {"tp", s.tp}}), name_(std::move(name)), shape_(std::move(shape)), tp_dim_(tp_dim) {
    w_ = register_parameter("w", torch::arange(c10::multiply_integers(local), torch::kFloat).view(local));
  }
  const DeviceMesh& checkpoint_mesh() const override { return mesh_; }
  std::vector<MeshParameter> mesh_parameters() override { return {{name_, shape_, tp_dim_, 0, w_, {}, 0}}; }

 private:
  DeviceMesh mesh_;
  std::string name_;
  std::vector<int64_t> shape_;
  int tp_dim_;
  at::Tensor w_;
};

// Saves "w" [3, 4] at dp=2, then restores at `shape` into `make`'s model; returns rank 1's message.
std::string restore_error(const std::function<std::unique_ptr<torch::nn::Module>(std::shared_ptr<Context>)>& make,
                          const std::function<void(const std::string&)>& damage = {}) {
  TempDir dir("cohort_mesh_bad");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    OneParameter m(ctx, {2, 1, 1}, "w", {3, 4}, 0, {3, 4});
    Checkpointer(dir.path(), ctx).save(TrainingState{&m});
  });
  if (damage) damage(dir.path() + "/step-00000000");
  std::vector<std::string> messages(2);
  const auto errors = run_ranks_collect(2, [&](std::shared_ptr<Context> ctx) {
    auto m = make(ctx);
    try {
      Checkpointer(dir.path(), ctx).restore_latest(TrainingState{m.get()});
    } catch (const CheckpointError& e) {
      messages[ctx->rank()] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_FALSE(e) << "not a CheckpointError";
  EXPECT_EQ(messages[1].find('\n'), std::string::npos) << messages[1];
  std::cout << messages[1] << "\n";
  return messages[1];
}

TEST(MeshCheckpoint, AParameterThatDoesNotFitIsOneLineNamingItTheRankAndTheNumbers) {
  // Another shape.
  std::string m = restore_error([](auto ctx) {
    return std::make_unique<OneParameter>(ctx, MeshShape{2, 1, 1}, "w", std::vector<int64_t>{3, 5}, 0, std::vector<int64_t>{3, 5});
  });
  EXPECT_NE(m.find("rank 1: parameter \"w\": shape [3, 4] in the checkpoint, [3, 5] in the model"), std::string::npos) << m;
  // A split the new mesh cannot make: 3 rows over tp=2.
  m = restore_error([](auto ctx) {
    return std::make_unique<OneParameter>(ctx, MeshShape{1, 2, 1}, "w", std::vector<int64_t>{3, 4}, 0, std::vector<int64_t>{1, 4});
  });
  EXPECT_NE(m.find("rank 1: parameter \"w\": dimension 0 of [3, 4] (3) does not split over tp=2"), std::string::npos) << m;
  // A piece of another shape than the mesh gives.
  m = restore_error([](auto ctx) {
    return std::make_unique<OneParameter>(ctx, MeshShape{1, 2, 1}, "w", std::vector<int64_t>{3, 4}, 1, std::vector<int64_t>{3, 4});
  });
  EXPECT_NE(m.find("rank 1: parameter \"w\": its piece is [3, 4], tp=2 along dimension 1 gives [3, 2]"), std::string::npos) << m;
  // A parameter the checkpoint lacks.
  m = restore_error([](auto ctx) {
    return std::make_unique<OneParameter>(ctx, MeshShape{2, 1, 1}, "v", std::vector<int64_t>{3, 4}, 0, std::vector<int64_t>{3, 4});
  });
  EXPECT_NE(m.find("rank 1: parameter \"v\": not in the checkpoint"), std::string::npos) << m;
  // A model that is not on a mesh.
  m = restore_error([](auto) {
    auto l = std::make_unique<torch::nn::Module>();
    l->register_parameter("w", torch::zeros({3, 4}));
    return l;
  });
  EXPECT_NE(m.find("was saved by a model on a device mesh"), std::string::npos) << m;
  // A piece whose bytes changed on disk: its hash in the manifest names it (the file's size is right).
  m = restore_error(
      [](auto ctx) {
        return std::make_unique<OneParameter>(ctx, MeshShape{1, 2, 1}, "w", std::vector<int64_t>{3, 4}, 1, std::vector<int64_t>{3, 2});
      },
      [](const std::string& dir) {
        std::FILE* f = std::fopen((dir + "/shard-00001-of-00002.safetensors").c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        std::fseek(f, -1, SEEK_END);
        std::fputc(0x7f, f);
        std::fclose(f);
      });
  EXPECT_NE(m.find("shard-00001-of-00002.safetensors: tensor \"w/param\" does not match its hash in the manifest"),
            std::string::npos) << m;
}

// A weight tied between the two stages of pp = 2 (the GPT's token embedding and head): stage 0
// saves "tied", stage 1 lists its copy (MeshParameter::copy). The checkpoint holds it once, from
// rank 0; a restore gives both stages stage 0's value and Adam state, at pp = 2 and at pp = 1.
class TiedWeight : public torch::nn::Module, public MeshCheckpointable {
 public:
  TiedWeight(std::shared_ptr<Context> ctx, int pp) : mesh_(ctx, {{"pp", pp}}) {
    w = register_parameter("w", torch::zeros({4, 3}));
    adam = std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{w}, torch::optim::AdamOptions(0.1));
  }
  const DeviceMesh& checkpoint_mesh() const override { return mesh_; }
  std::vector<MeshParameter> mesh_parameters() override {
    const int stage = mesh_.coordinate("pp");
    return {{"tied", {4, 3}, -1, stage, w, w, 0, stage == 1}};
  }
  at::Tensor w;
  std::unique_ptr<torch::optim::Adam> adam;

 private:
  DeviceMesh mesh_;
};

TEST(MeshCheckpoint, ATiedCopyIsRestoredFromTheStageThatSavesItNeverSaved) {
  TempDir dir("cohort_mesh_tied");
  std::map<int, at::Tensor> saved_w, saved_avg;
  std::mutex mu;
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    TiedWeight m(ctx, 2);
    {
      torch::NoGradGuard no_grad;
      m.w.copy_(torch::arange(12, torch::kFloat).view({4, 3}) * (ctx->rank() + 1));  // the copies differ: which one comes back shows
    }
    m.w.mutable_grad() = torch::full({4, 3}, 1.0f + ctx->rank());
    m.adam->step();
    ckpt::NamedTensors fields;
    ckpt::param_state_tensors(*m.adam, m.w, "tied", fields, ctx->rank());
    {  // not held across save(): a collective, the lock would keep the other rank out of it
      std::lock_guard<std::mutex> lock(mu);
      saved_w[ctx->rank()] = m.w.detach().clone();
      for (const auto& [key, t] : fields)
        if (key == "tied/exp_avg") saved_avg[ctx->rank()] = t.clone();
    }
    Checkpointer(dir.path(), ctx).save(TrainingState{&m, m.adam.get()});
  });
  ASSERT_TRUE(saved_avg.count(0) && !torch::equal(saved_w[0], saved_w[1]));
  const auto manifest = ckpt::Manifest::parse(slurp(dir.path() + "/step-00000000/manifest.json"));
  EXPECT_EQ(manifest.sharding_json.find("\"rank\":1"), std::string::npos) << manifest.sharding_json;
  for (const int pp : {2, 1}) {
    run_ranks(pp, [&](std::shared_ptr<Context> ctx) {
      TiedWeight m(ctx, pp);
      ASSERT_TRUE(Checkpointer(dir.path(), ctx).restore_latest(TrainingState{&m, m.adam.get()}).has_value());
      ckpt::NamedTensors fields;
      ckpt::param_state_tensors(*m.adam, m.w, "tied", fields, ctx->rank());
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(torch::equal(m.w.detach(), saved_w[0])) << "pp=" << pp << ", rank " << ctx->rank();
      bool avg = false;
      for (const auto& [key, t] : fields)
        if (key == "tied/exp_avg") avg = torch::equal(t, saved_avg[0]);
      EXPECT_TRUE(avg) << "pp=" << pp << ", rank " << ctx->rank() << ": Adam's exp_avg is not stage 0's";
    });
  }
}

TEST(MeshCheckpoint, CkptInspectAndListShowTheMesh) {
  TempDir dir("cohort_mesh_cli");
  run_ranks(2, [&](std::shared_ptr<Context> ctx) {
    OneParameter m(ctx, {1, 2, 1}, "w", {4, 4}, 0, {2, 4});
    Checkpointer(dir.path(), ctx).save(TrainingState{&m});
  });
  const std::string cohort = COHORT_BIN;
  const auto inspect = run_shell(cohort + " ckpt inspect " + dir.path() + "/step-00000000");
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  std::cout << inspect.output;
  EXPECT_NE(inspect.output.find("mesh        pp=1 x dp=1 x tp=2"), std::string::npos) << inspect.output;
  const auto json = run_shell(cohort + " ckpt inspect --json " + dir.path() + "/step-00000000");
  EXPECT_NE(json.output.find("\"mesh\": ["), std::string::npos) << json.output;
  const auto list = run_shell(cohort + " ckpt list --json " + dir.path());
  EXPECT_NE(list.output.find("\"mesh\": \"pp=1 x dp=1 x tp=2\""), std::string::npos) << list.output;
}

}  // namespace
}  // namespace cohort::testing::mesh
