// The GPT example on a device mesh (issue 47), with real processes through `cohort run`: every
// pipeline schedule, tensor parallelism and their composition with data parallelism train the
// tiny model for 20 steps to the parameters and the per-step gradient norms of one process with
// the same global batch (gradient accumulation) — bitwise where the reduction order allows, within
// 1e-9 relative in float64 where it does not (docs/parallel/tensor.md says why); bad meshes are one
// line. Kept short for CI: 32-token windows, batches of 2. No torch in this binary.
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

MeshRun train(int ranks, const std::string& args) {
  const auto r = run_shell(kCohort + " run --nproc-per-node " + std::to_string(ranks) + " --threads-per-proc 1 -- " + kMeshGpt +
                           kTwentySteps + " " + args);
  MeshRun out{r.exit_code, r.output, {}};
  const std::regex re("\\[0\\] step ([0-9]+) grad_norm ([-0-9.e+]+)");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), re), end; it != end; ++it) out.norms[std::stoi((*it)[1])] = (*it)[2];
  return out;
}

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
