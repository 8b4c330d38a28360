// The GPT example's command line, in one struct (main.cpp parses it, train.h uses it).
#pragma once

#include <cstdint>
#include <string>

#include "gpt_model.h"

struct Options {
  std::string preset = "tiny";
  GptConfig model;  // the preset's, with --layers/--heads/--dim/--positions/--seq-len/--vocab applied
  std::string mode = "ddp";  // ddp, zero1, zero2, zero3, diloco
  int64_t sync_every = 20;   // diloco: local steps between synchronisations (cohort/local_sgd.h)
  double outer_lr = 0.7, outer_momentum = 0.9;
  std::string comm_hook = "none";  // ddp only: none, fp16, bf16, powersgd (cohort/comm_hook.h)
  int powersgd_rank = 4;
  int64_t powersgd_start = 10;
  std::string corpus = "/usr/share/games/fortunes";
  std::string data;      // --data: a data set `cohort data prepare` wrote, read instead of --corpus (data/train_data.h)
  std::string val_data;  // --val-data: a prepared data set to evaluate on (default: --data's first windows)
  std::string data_cache;  // --data-cache: the folder an http(s) --data's shards are cached in
  bool print_batch_hashes = false;  // tests: rank 0 prints each global batch's hash (data/train_data.h)
  int64_t stop_at = 0;   // tests: end after this step (its checkpoint written), as if interrupted there
  std::string device = "cpu";  // cpu or cuda
  int64_t steps = 200;
  int batch = 8;  // sequences per rank and micro-step
  int accum = 1;  // micro-steps per optimizer step (all but the last under no_sync)
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  int64_t warmup = 20;
  uint64_t seed = 0;
  int threads = 0;
  int warmup_steps = 3;  // steps before the throughput timer starts
  int64_t eval_every = 0;  // 0: only at the end
  int64_t eval_windows = 64;
  int log_every = 10;  // print the job's mean loss every N steps (rank 0); 0: never
  int sample_tokens = 120;
  double peak_tflops = 0;  // 0: 989 on CUDA (H100/H200 bf16 dense), measured GEMM throughput on CPU
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  bool ckpt_sync = false;
  int64_t snapshot_every = 0;  // in-memory snapshots every N steps (0: none; under cohort run)
  bool bf16 = true;  // autocast to bf16 on CUDA
  bool phase_times = false;  // milliseconds per phase of a step in the result (phase_times.h)
  // The device mesh (issue 47, mesh/mesh_train.h): pp x dp x tp ranks, tp innermost.
  int tp = 1, pp = 1, dp = 0;  // dp 0: the world / (tp * pp)
  std::string schedule = "1f1b";  // gpipe, 1f1b, interleaved, zbh1
  int microbatches = 0;           // per optimizer step and dp rank, each of --batch sequences (0: --pp)
  int virtual_stages = 0;         // interleaved: stages per pipeline rank (0: 2 for interleaved, else 1)
  // Tests: each step's global gradient norm (before clipping) on rank 0, and the whole model
  // written to a file (--save-params) or compared with one (--compare-params: param_max_rel_diff).
  bool print_grad_norms = false;
  std::string save_params, compare_params;
  bool f64 = false;  // --double: the model in float64 (tests: equivalence below float32's rounding)
  bool sequence_parallel = false;  // --sequence-parallel: LayerNorm regions split along the sequence over tp
  bool mesh() const { return tp > 1 || pp > 1 || dp > 0 || microbatches > 0; }
};
