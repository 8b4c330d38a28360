// The GPT example on a device mesh (issue 47), with real processes through `cohort run`: every
// pipeline schedule, tensor parallelism and their composition with data parallelism train the
// tiny model for 20 steps to the parameters and the per-step gradient norms of one process with
// the same global batch (gradient accumulation) — bitwise where the reduction order allows, within
// 1e-9 relative in float64 where it does not (docs/parallel/tensor.md says why); bad meshes are one
// line. A run checkpointed on one mesh resumes on another (--ckpt-dir). Kept short for CI: 32-token
// windows, batches of 2. No torch in this binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "support/subprocess.h"

namespace fs = std::filesystem;
using namespace cohort::testing;  // run_shell, contains (support/subprocess.h)

namespace {

const std::string kMeshGpt = COHORT_GPT;
const std::string kFortunes = "/usr/share/games/fortunes";
// Short runs, same code paths: the tiny preset at 32 tokens, 20 steps, each step's gradient norm.
const std::string kTwentySteps =
    " --preset tiny --seq-len 32 --batch 2 --steps 20 --threads 1 --eval-windows 8 --sample-tokens 0 --log-every 0"
    " --print-grad-norms --peak-tflops 1";

struct MeshRun {
  int exit_code = -1;
  std::string output;
  std::map<int, std::string> norms;  // step -> rank 0's gradient norm before clipping, as printed (%.17g)
  std::string result(int rank) const {
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("[" + std::to_string(rank) + "] {", 0) == 0) return line;
    return "";
  }
  std::string field(int rank, const std::string& name) const {
    std::smatch m;
    const std::string line = result(rank);
    if (std::regex_search(line, m, std::regex("\"" + name + "\":(\"[^\"]*\"|[-0-9.e+]+|null|true|false)"))) return m[1];
    return "";
  }
};

// `args` alone (train() adds kTwentySteps).
MeshRun train_with(int ranks, const std::string& args) {
  const auto r = run_shell(kCohort + " run --nproc-per-node " + std::to_string(ranks) + " --threads-per-proc 1 -- " + kMeshGpt + " " + args);
  MeshRun out{r.exit_code, r.output, {}};
  const std::regex re("\\[0\\] step ([0-9]+) grad_norm ([-0-9.e+]+)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it) out.norms[std::stoi((*it)[1])] = (*it)[2];
  return out;
}

MeshRun train(int ranks, const std::string& args) { return train_with(ranks, kTwentySteps + " " + args); }

class GptMesh : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kFortunes)) GTEST_SKIP() << "Debian's fortunes package is not installed";
    dir_ = fs::temp_directory_path() / ("cohort_gpt_mesh_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // One process with the global batch: --accum micro-steps of --batch 2, its parameters saved.
  MeshRun reference(int accum, const std::string& dtype, std::string* saved) {
    *saved = (dir_ / ("reference_" + std::to_string(accum) + dtype + ".pt")).string();
    MeshRun r = train(1, "--accum " + std::to_string(accum) + " " + dtype + " --save-params " + *saved);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.norms.size(), 20u) << r.output;
    return r;
  }

  // Every step's gradient norm and the final parameters within `bound` (relative) of the reference.
  static void expect_close(const MeshRun& reference, const MeshRun& run, int ranks, double bound, const std::string& what) {
    ASSERT_EQ(run.exit_code, 0) << what << "\n" << run.output;
    ASSERT_EQ(run.norms.size(), reference.norms.size()) << what << "\n" << run.output;
    for (const auto& [step, norm] : reference.norms) {
      const double want = std::stod(norm), got = std::stod(run.norms.at(step));
      EXPECT_LE(std::abs(got - want), bound * want) << what << ": the gradient norm of step " << step << " is " << got << ", one process's " << want;
    }
    EXPECT_LT(std::stod(run.field(0, "param_max_rel_diff")), bound) << what << "\n" << run.result(0);
    for (int rank = 1; rank < ranks; ++rank)
      EXPECT_EQ(run.field(rank, "param_checksum"), run.field(0, "param_checksum")) << what << ": rank " << rank << " gathers another model";
  }

  fs::path dir_;
};

// One microbatch per step: no sum the pipeline adds in another order (the tied embedding's two
// gradients are summed as one process sums them), so the pipeline is the one-process run, bit for
// bit, in float32 — ZB-H1's split backward (B, then W) included.
TEST_F(GptMesh, APipelineOfOneMicrobatchIsBitwiseTheOneProcessRun) {
  std::string saved;
  const MeshRun one = reference(1, "", &saved);
  const MeshRun zb = train(2, "--pp 2 --schedule zbh1 --microbatches 1");
  ASSERT_EQ(zb.exit_code, 0) << zb.output;
  EXPECT_EQ(zb.norms, one.norms) << zb.output;
  EXPECT_EQ(zb.field(0, "param_checksum"), one.field(0, "param_checksum")) << zb.output;
  EXPECT_EQ(zb.field(1, "param_checksum"), one.field(0, "param_checksum")) << zb.output;
  EXPECT_EQ(zb.field(0, "pp"), "2");
}

// Two microbatches: the tied embedding's gradient is (e0 + e1) + (h0 + h1) on the pipeline and
// (h0 + e0) + (h1 + e1) in one process, and tensor parallelism sums each product in parts: not
// bitwise. In float64 the rounding is 1e-16 and 20 steps of AdamW amplify it to ~1e-13 (measured
// ≤ 5e-13): each schedule and tp = 2 stay within 1e-9, where a lost or doubled microbatch is 1e-1.
TEST_F(GptMesh, EveryScheduleAndTensorParallelMatchOneProcessInFloat64) {
  std::string saved;
  const MeshRun one = reference(2, "--double", &saved);
  for (const std::string schedule : {"gpipe", "1f1b", "interleaved", "zbh1"}) {
    const MeshRun run = train(2, "--double --pp 2 --microbatches 2 --schedule " + schedule + " --compare-params " + saved);
    expect_close(one, run, 2, 1e-9, "--pp 2 --schedule " + schedule);
    if (schedule == "interleaved") EXPECT_EQ(run.field(0, "virtual_stages"), "2") << run.result(0);
  }
  const MeshRun tp = train(2, "--double --tp 2 --microbatches 2 --compare-params " + saved);
  expect_close(one, tp, 2, 1e-9, "--tp 2");
  // The validation loss goes through the vocabulary-parallel cross-entropy (one process's
  // evaluation reads its logits in float32: float32's rounding).
  EXPECT_NEAR(std::stod(tp.field(0, "val_loss")), std::stod(one.field(0, "val_loss")), 1e-5) << tp.output;
}

// Four ranks: two pipelines (or two tensor-parallel pairs, their LayerNorm regions split along the
// sequence) under DDP on their dp slices, each with two microbatches per step: the global batch of
// one process's four micro-steps.
TEST_F(GptMesh, PipelineOrTensorTimesDataParallelMatchOneProcessInFloat64) {
  std::string saved;
  const MeshRun one = reference(4, "--double", &saved);
  const MeshRun pp = train(4, "--double --pp 2 --dp 2 --microbatches 2 --schedule 1f1b --compare-params " + saved);
  expect_close(one, pp, 4, 1e-9, "--pp 2 --dp 2");
  const MeshRun tp = train(4, "--double --tp 2 --sequence-parallel --dp 2 --microbatches 2 --compare-params " + saved);
  expect_close(one, tp, 4, 1e-9, "--tp 2 --sequence-parallel --dp 2");
  EXPECT_EQ(tp.field(0, "sequence_parallel"), "true") << tp.result(0);
}

// Checkpoints across meshes (issue 47, item 5): a tp = 2 run stopped at step 10 resumes at dp = 2
// (one microbatch per dp rank: the same global batch), which stops at 15 and resumes at pp = 2 to
// step 20: every step's gradient norm and the final model within 1e-9 of the tp = 2 run that never
// stopped (the meshes sum in other orders; a step trained on the wrong batch, a lost AdamW moment or
// the tied embedding's stale copy on the last stage is 1e-2 or more). On the same mesh the resumed
// run is that run bit for bit; at one rank, within 1e-9. A model the checkpoint does not fit is one
// line naming the parameter and both shapes.
TEST_F(GptMesh, ACheckpointOnOneMeshResumesOnAnother) {
  const std::string run20 =
      " --preset tiny --seq-len 32 --batch 2 --steps 20 --threads 1 --eval-windows 8 --sample-tokens 0 --log-every 0"
      " --print-grad-norms --peak-tflops 1 --double ";
  const std::string full = (dir_ / "tp2.pt").string(), ckpt = (dir_ / "ckpt").string();
  const auto resumed_at = [](const MeshRun& r, int step) {
    const std::string n = std::to_string(step);
    return contains(r.output, "[0] resumed from ") && contains(r.output, "/step-" + std::string(8 - n.size(), '0') + n + " (step " + n);
  };
  const std::string every = " --ckpt-every 5 --ckpt-dir ";
  const auto run = [&](int ranks, const std::string& args) { return train_with(ranks, run20 + args); };
  const MeshRun tp = run(2, "--tp 2 --microbatches 2 --save-params " + full);
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  ASSERT_EQ(tp.norms.size(), 20u) << tp.output;

  const MeshRun first = run(2, "--tp 2 --microbatches 2 --stop-at 10" + every + ckpt);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(first.norms.size(), 10u) << first.output;
  for (const auto& [step, norm] : first.norms) EXPECT_EQ(norm, tp.norms.at(step)) << "step " << step;
  ASSERT_TRUE(fs::is_directory(ckpt + "/step-00000010")) << first.output;
  for (const std::string copy : {"same", "one"}) fs::copy(ckpt, dir_ / copy, fs::copy_options::recursive);

  // (dp, tp, pp) = (1, 2, 1) -> (2, 1, 1) -> (1, 1, 2), each leg's norms against the run that never stopped.
  const MeshRun dp = run(2, "--dp 2 --microbatches 1 --stop-at 15" + every + ckpt);
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_TRUE(resumed_at(dp, 10)) << dp.output;
  const MeshRun pp = run(2, "--pp 2 --microbatches 2" + every + ckpt + " --compare-params " + full);
  ASSERT_EQ(pp.exit_code, 0) << pp.output;
  EXPECT_TRUE(resumed_at(pp, 15)) << pp.output;
  MeshRun legs = pp;
  legs.norms.insert(first.norms.begin(), first.norms.end());
  legs.norms.insert(dp.norms.begin(), dp.norms.end());
  expect_close(tp, legs, 2, 1e-9, "--tp 2 to step 10, --dp 2 to 15, --pp 2 to 20");

  const MeshRun same = run(2, "--tp 2 --microbatches 2" + every + (dir_ / "same").string());
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_TRUE(resumed_at(same, 10)) << same.output;
  ASSERT_EQ(same.norms.size(), 10u) << same.output;
  for (const auto& [step, norm] : same.norms) EXPECT_EQ(norm, tp.norms.at(step)) << "--tp 2 resumed on --tp 2, step " << step;
  EXPECT_EQ(same.field(0, "param_checksum"), tp.field(0, "param_checksum")) << same.output;

  MeshRun one = run(1, "--microbatches 2" + every + (dir_ / "one").string() + " --compare-params " + full);
  EXPECT_TRUE(resumed_at(one, 10)) << one.output;
  one.norms.insert(first.norms.begin(), first.norms.end());
  expect_close(tp, one, 1, 1e-9, "--tp 2 to step 10, one rank to 20");

  // A model of another vocabulary: refused before any value is written, on the rank that finds it.
  const auto bad = run_shell("timeout -s KILL 20 env -i " + kMeshGpt + run20 + "--microbatches 2 --vocab 512 --ckpt-dir " + ckpt);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output, "gpt: rank 0: parameter \"embed.wte.weight\": shape [256, 256] in the checkpoint, [512, 256] in the model\n");
}

TEST(GptMeshInput, BadMeshesAreOneLineNamingTheRankAndTheNumbers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--tp 2 --pp 2", "gpt: rank 0: --pp 2 x --tp 2 = 4 ranks per model replica does not divide the world of 1 ranks\n"},
      {"--tp 2 --heads 3 --dim 192", "gpt: rank 0: --heads 3 does not divide over --tp 2 ranks\n"},
      {"--tp 2 --vocab 257", "gpt: rank 0: --vocab 257 does not divide over --tp 2 ranks\n"},
      {"--tp 2 --sequence-parallel --seq-len 33", "gpt: rank 0: --seq-len 33 does not divide over --tp 2 ranks (--sequence-parallel)\n"},
      {"--pp 2 --layers 3", "gpt: rank 0: --layers 3 do not divide into 2 pipeline stages (--pp 2 x 1 virtual stages)\n"},
      {"--pp 2 --schedule interleaved --microbatches 3",
       "gpt: rank 0: pipeline schedule interleaved-1f1b (p=2 pipeline ranks, v=2 stages per rank, m=3 microbatches): "
       "interleaved-1f1b needs the microbatches to be a multiple of the pipeline ranks (2)\n"},
      {"--pp 2 --mode zero3", "gpt: rank 0: --tp/--pp/--dp/--microbatches run with --mode ddp and no --comm-hook (got --mode zero3, --comm-hook none)\n"},
  };
  for (const auto& [flags, expected] : cases) {
    const auto r = run_shell("timeout -s KILL 20 env -i " + kMeshGpt + " --steps 1 " + flags);  // killed if it hangs: exit 137
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_EQ(r.output, expected) << flags;
  }
  // Through the launcher, before any group connects (the first rank to say it ends the job: the
  // launcher stops the other, which may not have got that far).
  const auto r = run_shell(kCohort + " run --nproc-per-node 2 --threads-per-proc 1 -- " + kMeshGpt + " --steps 1 --tp 2 --dp 3");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[([01])\\] gpt: rank \\1: --pp 1 x --dp 3 x --tp 2 = 6 ranks, but the world has 2\n")))
      << r.output;
}

}  // namespace
