// gpt: trains a GPT-2-style language model on a text corpus with cohort — data parallel (DDP),
// sharded (ZeRO levels 1-3) or DiLoCo (local steps, cohort/local_sgd.h) — on CPU ranks or CUDA
// devices (bf16 autocast). Small on CPU (preset tiny), GPT-2 124M size on a GPU (preset
// gpt2-124m). Start it with `cohort run`, e.g.
//   cohort run --nproc-per-node 2 -- ./gpt --preset tiny --steps 300 --mode zero3
// It checkpoints with --ckpt-dir (the model, AdamW's state, the sampler's data position and the
// learning-rate schedule) and resumes bit for bit (under `cohort run --keep-survivors` with
// --snapshot-every, a lost peer's replacement and the survivors go on from the newest snapshot
// without restarting the job); evaluates the validation loss every
// --eval-every steps and at the end; ends with one JSON line per rank: val_loss, tokens_per_s,
// mfu, param_checksum, world_size, steps, and a short generated sample.
// What it does not do: tokenise beyond bytes, KV-cache generation, dropout (training stays
// bitwise reproducible).
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <iostream>
#include <thread>

#include "cli_checks.h"  // examples::kFinite, examples::parse_command_line
#include "data/corpus.h"
#include "error_line.h"  // examples::error_line
#include "gpt_model.h"
#include "mesh/mesh_model.h"  // gpt_mesh::check_options
#include "mesh/mesh_train.h"
#include "options.h"
#include "train.h"
#include "data/train_data.h"  // load_prepared: --data

namespace {

// Flags that override the preset, applied only when given.
struct Overrides {
  int64_t vocab = 0, positions = 0, seq_len = 0, layers = 0, heads = 0, dim = 0;
  bool aten_gelu = false;
};

int run(Options o, const Overrides& ov) {
  const int env_rank = cohort::resolve_job_env().rank;
  const auto preset = gpt_preset(o.preset);
  if (!preset) throw cohort::ConfigError(env_rank, "no preset \"" + o.preset + "\" (there are: tiny, gpt2-124m)");
  o.model = *preset;
  for (auto [flag, field] : {std::pair{ov.vocab, &o.model.vocab}, {ov.layers, &o.model.layers}, {ov.heads, &o.model.heads},
                             {ov.dim, &o.model.dim}, {ov.positions, &o.model.positions}})
    if (flag != 0) *field = flag;
  if (ov.positions != 0 && ov.seq_len == 0) o.model.seq_len = std::min(o.model.seq_len, o.model.positions);
  if (ov.seq_len != 0) o.model.seq_len = ov.seq_len;
  o.model.aten_gelu = ov.aten_gelu;
  if (const std::string problem = o.model.problem(); !problem.empty()) throw cohort::ConfigError(env_rank, problem);
  if (o.mesh()) gpt_mesh::check_options(o, cohort::resolve_job_env().world_size, env_rank);  // before any connection
  if (o.mesh() && !o.data.empty()) throw cohort::ConfigError(env_rank, "--data with --tp/--pp is not built yet: train on --corpus there");

  // The corpus before init(): a warm spare (cohort run --warm-spares) has it read when released.
  // A prepared data set (--data) is mapped, not read, and sets the vocabulary.
  const Corpus corpus = o.data.empty() ? load_corpus(o.corpus, env_rank)
                                       : load_prepared(o, env_rank, cohort::resolve_job_env().world_size);
  auto ctx = cohort::init();
  const torch::Device device = ctx->device(o.device == "cuda" ? torch::kCUDA : torch::kCPU);
  int threads = o.threads;
  if (threads <= 0) {
    const char* env = std::getenv("COHORT_THREADS");  // set by `cohort run --threads-per-proc`
    threads = env ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency()) / ctx->local_world_size();
  }
  cohort::set_num_threads(std::max(1, threads));

  if (o.mesh()) {  // tensor, pipeline and data parallel (mesh/mesh_train.h)
    nlohmann::json result = train_mesh(ctx, corpus, o);
    result["rank"] = ctx->rank();
    result["preset"] = o.preset;
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    return 0;
  }
  torch::manual_seed(o.seed);  // the same initial model everywhere (rank 0's is broadcast anyway)
  torch::nn::Sequential net = make_gpt(o.model);
  net->to(device);
  if (o.f64) net->to(torch::kDouble);
  nlohmann::json result;
  if (o.mode == "ddp") {
    cohort::DDPOptions ddp;
    cohort::PowerSGDOptions powersgd;
    powersgd.rank = o.powersgd_rank;
    powersgd.start_step = o.powersgd_start;
    ddp.comm_hook = cohort::comm_hook_by_name(o.comm_hook, powersgd);
    Ddp model(net, ctx, ddp);
    result = train(model, ctx, corpus, o, device);
    if (o.comm_hook != "none") result["comm_hook"] = o.comm_hook;
  } else if (o.comm_hook != "none") {
    throw cohort::ConfigError(ctx->rank(), "--comm-hook applies to --mode ddp only");
  } else if (o.mode == "diloco") {
    cohort::LocalSGDOptions lo;
    lo.sync_every = o.sync_every;
    lo.outer = cohort::OuterOptimizer::nesterov;
    lo.outer_lr = o.outer_lr;
    lo.outer_momentum = o.outer_momentum;
    Local model(net, ctx, lo);
    result = train(model, ctx, corpus, o, device);
    result["sync_every"] = o.sync_every;
  } else {
    cohort::ShardedOptions so;
    so.level = static_cast<cohort::ShardingLevel>(o.mode.back() - '0');
    // The head reads the embedding's weight (tied): at level 3 that unit stays gathered meanwhile.
    if (so.level == cohort::ShardingLevel::parameters) so.keep_gathered = {"embed"};
    Sharded model(net, ctx, so);
    result = train(model, ctx, corpus, o, device);
  }
  result["rank"] = ctx->rank();
  result["preset"] = o.preset;
  // The sample is whatever bytes the model generated, rarely UTF-8 early in training: replaced, not thrown.
  std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a GPT-2-style language model with cohort (DDP or ZeRO 1-3)"};
  Options o;
  Overrides ov;
  app.add_option("--preset", o.preset, "tiny or gpt2-124m")->capture_default_str();
  app.add_option("--vocab", ov.vocab, "Embedding rows (>= 256, the byte tokenizer's)")->check(CLI::PositiveNumber);
  app.add_option("--positions", ov.positions, "Position table size (longest sequence)")->check(CLI::PositiveNumber);
  app.add_option("--seq-len", ov.seq_len, "Training sequence length (<= --positions)")->check(CLI::PositiveNumber);
  app.add_option("--layers", ov.layers, "Transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", ov.heads, "Attention heads (must divide --dim)")->check(CLI::PositiveNumber);
  app.add_option("--dim", ov.dim, "Model width")->check(CLI::PositiveNumber);
  app.add_flag("--aten-gelu", ov.aten_gelu, "ATen's tanh-GELU kernel on CPU instead of the example's (for comparison)");
  app.add_option("--mode", o.mode, "ddp, zero1, zero2, zero3 or diloco (local steps, Nesterov outer step)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3", "diloco"}))
      ->capture_default_str();
  app.add_option("--sync-every", o.sync_every, "--mode diloco: local steps between synchronisations")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--outer-lr", o.outer_lr, "--mode diloco: outer learning rate")->check(examples::kFinite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--outer-momentum", o.outer_momentum, "--mode diloco: outer Nesterov momentum, in [0, 1)")
      ->check(examples::kFinite)->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--comm-hook", o.comm_hook, "--mode ddp: none, fp16, bf16 or powersgd")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  app.add_option("--powersgd-rank", o.powersgd_rank, "PowerSGD: rank of the approximation")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--powersgd-start", o.powersgd_start, "PowerSGD: steps of plain allreduce first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--corpus", o.corpus, "A text file, or a directory of them")->capture_default_str();
  app.add_option("--data", o.data, "A token data set from `cohort data prepare`, read instead of --corpus (docs/gpt.md)");
  app.add_option("--data-cache", o.data_cache, "--data at an http(s) URL: the folder its shards are cached in (the ranks of a machine may share it)");
  app.add_option("--val-data", o.val_data, "--data: a prepared data set to evaluate on (default: --data's first windows, not held out)");
  app.add_flag("--print-batch-hashes", o.print_batch_hashes, "Print each global batch's hash on rank 0 (tests)");
  app.add_option("--stop-at", o.stop_at, "End after this step, its checkpoint written, as if interrupted (tests)")->check(CLI::NonNegativeNumber);
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--steps", o.steps, "Optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "Sequences per rank and micro-step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--accum", o.accum, "Micro-steps per optimizer step (gradient accumulation)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "Peak learning rate")->check(examples::kFinite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine")->check(examples::kFinite)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "Warm-up steps of the schedule")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay, matrices only")->check(examples::kFinite)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--clip", o.clip, "Gradient norm clipping")->check(examples::kFinite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the model and the data order")->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per rank (0: COHORT_THREADS, else cores / local ranks)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--timing-warmup", o.warmup_steps, "Steps before the throughput timer starts")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "Validation loss every N steps (0: only at the end)")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-windows", o.eval_windows, "Validation sequences per evaluation")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--log-every", o.log_every, "Print the job's loss every N steps (rank 0; 0: never)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--sample-tokens", o.sample_tokens, "Bytes to generate at the end (0: none)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "Per-rank peak for MFU (0: 989 on CUDA, measured GEMM rate on CPU)")->check(examples::kFinite)->check(CLI::NonNegativeNumber);
  auto* dir = app.add_option("--ckpt-dir", o.ckpt_dir, "Checkpoint here, and resume from here");
  app.add_option("--ckpt-every", o.ckpt_every, "Checkpoint every N steps (0: only resume)")->check(CLI::NonNegativeNumber)->needs(dir);
  app.add_flag("--ckpt-sync", o.ckpt_sync, "Write checkpoints synchronously");
  app.add_option("--snapshot-every", o.snapshot_every, "Also snapshot the training state in memory every N steps (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->needs(dir);
  app.add_flag("!--no-bf16", o.bf16, "On CUDA, train in float32 instead of bf16 autocast");
  app.add_flag("--phase-times", o.phase_times, "Time each phase of a step (synchronising the device) into the result's phase_ms");
  app.add_option("--tp", o.tp, "Tensor-parallel ranks (attention heads, MLP and vocabulary split)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--pp", o.pp, "Pipeline-parallel ranks (the blocks split into stages)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dp", o.dp, "Data-parallel ranks with --tp/--pp (0: the world / (tp x pp))")->check(CLI::NonNegativeNumber);
  app.add_option("--schedule", o.schedule, "Pipeline schedule: gpipe, 1f1b, interleaved or zbh1")->capture_default_str();
  app.add_option("--microbatches", o.microbatches, "Microbatches of --batch sequences per step and dp rank (0: --pp)")->check(CLI::NonNegativeNumber);
  app.add_option("--virtual-stages", o.virtual_stages, "Stages per pipeline rank (interleaved; 0: 2 for interleaved, else 1)")->check(CLI::NonNegativeNumber);
  app.add_flag("--sequence-parallel", o.sequence_parallel, "With --tp: LayerNorm regions split along the sequence over the tp ranks");
  app.add_flag("--double", o.f64, "Train in float64 on the CPU (tests: equivalence where float32 rounding would be amplified)");
  app.add_flag("--print-grad-norms", o.print_grad_norms, "Print each step's global gradient norm before clipping (rank 0)");
  app.add_option("--save-params", o.save_params, "Write the whole model's parameters here at the end (rank 0; tests)");
  app.add_option("--compare-params", o.compare_params, "Compare the final parameters with this --save-params file (param_max_rel_diff)");
  if (auto status = examples::parse_command_line(app, argc, argv, "gpt")) return *status;
  if (o.min_lr > o.lr) {
    std::cerr << "gpt: --min-lr " << o.min_lr << " is above --lr " << o.lr << std::endl;
    return 2;
  }
  if (o.f64 && o.device != "cpu") {
    std::cerr << "gpt: --double trains on --device cpu only" << std::endl;
    return 2;
  }
  try {
    return run(o, ov);
  } catch (const cohort::Error& e) {
    std::cerr << "gpt: " + std::string(e.what()) + "\n" << std::flush;
    return 2;
  } catch (const std::exception& e) {  // libtorch's errors included, by their first line
    std::cerr << "gpt: " + examples::error_line(e) + "\n" << std::flush;
    return 1;
  }
}
