// The GPT example's training loop, the same for DDP and every sharding level: the wrapper type is
// a template parameter, and the few things that differ between them (gradient clipping, weight
// decay on matrices only, the parameters' checksum) are overloads below.
#pragma once

#include <cohort/cohort.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <optional>

#include "clip_grad.h"
#include "data/corpus.h"
#include "gpt_model.h"
#include "options.h"
#include "phase_times.h"
#include "mesh/test_outputs.h"
#include "schedule.h"
#include "data/train_data.h"

using Ddp = cohort::DistributedDataParallel<torch::nn::Sequential>;
using Sharded = cohort::ShardedDataParallel<torch::nn::Sequential>;
using Local = cohort::LocalSGD<torch::nn::Sequential>;

// --- what differs between the wrappers -------------------------------------------------------------

// Each returns the global norm before clipping (a tensor: read back only for --print-grad-norms).
inline torch::Tensor clip_gradients(Ddp& m, double max_norm) { return clip_grad_norm_queued(m->parameters(), max_norm); }
inline torch::Tensor clip_gradients(Sharded& m, double max_norm) {  // over the shards: a collective
  return torch::scalar_tensor(m->clip_grad_norm(max_norm), torch::kDouble);
}
inline torch::Tensor clip_gradients(Local& m, double max_norm) { return clip_grad_norm_queued(m->parameters(), max_norm); }

// After the optimizer's step and at the end: DiLoCo counts its local steps and synchronises.
template <typename M>
void after_step(M&) {}
inline void after_step(Local& m) { m->step(); }
template <typename M>
void finish(M&) {}
inline void finish(Local& m) { m->finish(); }

/// Decoupled weight decay (AdamW's p ← p·(1 − lr·wd)) on matrices only — embeddings and linear
/// weights, not biases or LayerNorm gains, as GPT-2 and nanoGPT train. Applied before the
/// optimizer's step (which runs with weight_decay 0); on flat shards through a mask, with the same
/// multiplier, so both give bitwise the same decay.
struct MatrixDecay {
  std::vector<torch::Tensor> params, masks;  // mask undefined: the whole tensor decays
  void apply(double lr, double wd) const {
    if (wd == 0) return;
    torch::NoGradGuard no_grad;
    const double factor = 1.0 - lr * wd;
    // The whole tensors in one call (one launch on a GPU; the same multiply, so the same bits).
    std::vector<torch::Tensor> whole;
    for (size_t i = 0; i < params.size(); ++i)
      if (!masks[i].defined()) whole.push_back(params[i]);
    if (!whole.empty()) torch::_foreach_mul_(whole, factor);
    for (size_t i = 0; i < params.size(); ++i) {
      if (masks[i].defined()) {
        params[i].mul_(torch::where(masks[i], torch::scalar_tensor(factor, params[i].options()),
                                    torch::scalar_tensor(1.0, params[i].options())));
      }
    }
  }
};
template <typename M>  // Ddp, Local: the wrapped module's own parameters
MatrixDecay matrix_decay(M& m) {
  MatrixDecay d;
  for (auto& p : m->module()->parameters())
    if (p.dim() >= 2) d.params.push_back(p), d.masks.emplace_back();
  return d;
}
inline MatrixDecay matrix_decay(Sharded& m) {
  MatrixDecay d;
  d.params = m->parameters();
  for (auto& mask : m->shard_masks([](const std::string&, c10::IntArrayRef sizes) { return sizes.size() >= 2; }))
    d.masks.push_back(mask.to(torch::kBool));
  return d;
}

inline std::string hex16(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(v));
  return hex;
}
template <typename M>  // Ddp, Local
std::vector<torch::Tensor> full_parameters_of(M& m) {
  return m->module()->parameters();
}
inline std::vector<torch::Tensor> full_parameters_of(Sharded& m) {  // collective: gathers the whole model
  std::vector<torch::Tensor> all;
  for (auto& [name, t] : m->full_state(nullptr).model) all.push_back(t);
  return all;
}

// --- helpers -------------------------------------------------------------------------------------

/// Sum over ranks (CPU, double). Called where no collective of the wrapper is in flight.
inline std::vector<double> sum_over_ranks(cohort::Context& ctx, std::vector<double> values) {
  std::vector<torch::Tensor> t{torch::tensor(values, torch::kDouble)};
  if (ctx.world_size() > 1) ctx.group()->allreduce(t)->wait();
  return {t[0].data_ptr<double>(), t[0].data_ptr<double>() + values.size()};
}

/// FLOP/s one rank's threads sustain on a large float matrix product: the CPU's stand-in for a
/// GPU's datasheet peak in MFU. Every rank measures at the same time (after a barrier), as they
/// train: ranks sharing a machine share its cores and memory bandwidth. The best of five 100 ms
/// windows, so that a moment of other load does not lower the yardstick.
inline double measured_gemm_flops(cohort::Context& ctx) {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  (void)torch::mm(a, b);
  ctx.barrier();
  double best = 0;
  for (int window = 0; window < 5; ++window) {
    const auto t0 = std::chrono::steady_clock::now();
    int count = 0;
    for (; std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(100); ++count) (void)torch::mm(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n * count / s);
  }
  return best;
}

/// The job's MFU yardstick on CPU (the sum of measured_gemm_flops over the ranks), measured once
/// and kept in the checkpoints and snapshots: a restart, or the replacement of a lost peer under
/// `cohort run --keep-survivors`, goes on with it instead of half a second of GEMMs on the
/// recovery's path. Whether to measure is agreed (one small allreduce), so that ranks whose
/// states differ (no checkpoint to restore, a replacement) still meet in the same collectives.
class PeakFlops : public cohort::Stateful {
 public:
  double get(cohort::Context& ctx) {
    if (sum_over_ranks(ctx, {flops_ > 0 ? 0.0 : 1.0})[0] > 0) flops_ = sum_over_ranks(ctx, {measured_gemm_flops(ctx)})[0];
    return flops_;
  }
  std::string state_dict() const override { return nlohmann::json{{"flops", flops_}}.dump(); }
  void load_state_dict(const std::string& state) override { flops_ = nlohmann::json::parse(state).at("flops").get<double>(); }

 private:
  double flops_ = 0;  // 0: not measured
};

/// Mean next-token loss over the first `windows` validation windows (rounded down to a multiple
/// of the world size), each rank taking every world-th: the same number of forwards on every rank.
template <typename M>
double evaluate(M& model, cohort::Context& ctx, TokenWindows& val, const Options& o, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t w = ctx.world_size();
  const int64_t n = std::min<int64_t>(o.eval_windows, static_cast<int64_t>(*val.size())) / w * w;
  double sum = 0, tokens = 0;
  for (int64_t first = ctx.rank(); first < n; first += w * o.batch) {
    std::vector<size_t> idx;
    for (int64_t i = first; i < n && static_cast<int64_t>(idx.size()) < o.batch; i += w) idx.push_back(static_cast<size_t>(i));
    auto batch = val.get_batch(idx);
    cohort::AutocastGuard autocast(torch::kBFloat16, device.is_cuda() && o.bf16);
    const torch::Tensor logits = model->forward(batch.data.to(device));
    sum += torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}).to(torch::kFloat), batch.target.to(device).reshape({-1}),
                                                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               .item<double>();
    tokens += static_cast<double>(batch.target.numel());
  }
  model->train();
  const auto total = sum_over_ranks(ctx, {sum, tokens});
  return total[1] > 0 ? total[0] / total[1] : NAN;
}

/// Continues `prompt` by `count` sampled bytes (temperature 0.8, top 40), the same on every rank.
template <typename M>
std::string generate(M& model, const GptConfig& c, const std::string& prompt, int count, uint64_t seed,
                     const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto gen = at::detail::createCPUGenerator(seed);
  std::string text = prompt;
  for (int i = 0; i < count; ++i) {
    const size_t from = text.size() > static_cast<size_t>(c.positions) ? text.size() - c.positions : 0;
    std::vector<int64_t> ids(text.begin() + static_cast<std::ptrdiff_t>(from), text.end());
    for (auto& id : ids) id = static_cast<uint8_t>(id);
    const torch::Tensor logits = model->forward(torch::tensor(ids, torch::kLong).unsqueeze(0).to(device));
    const torch::Tensor last = logits[0][-1].to(torch::kCPU, torch::kFloat) / 0.8;
    auto [top, where] = last.topk(40);
    const int64_t pick = torch::multinomial(torch::softmax(top, 0), 1, false, gen).item<int64_t>();
    text.push_back(static_cast<char>(where[pick].item<int64_t>()));
  }
  model->train();
  return text.substr(prompt.size());
}

// --- the loop --------------------------------------------------------------------------------------

template <typename M>
nlohmann::json train(M& model, std::shared_ptr<cohort::Context> ctx, const Corpus& corpus, const Options& o,
                     const torch::Device& device) {
  cohort::Context& c = *ctx;
  const GptConfig& cfg = o.model;
  TrainBatches batches(corpus, ctx, o);  // the corpus's windows, or the prepared data set (--data)
  TokenWindows val_set(corpus.val, cfg.seq_len);
  // Every rank evaluates at least one validation window (evaluate() takes a multiple of the world
  // size): fewer, and the validation loss is 0 / 0 on every rank, a NaN in a run that exits 0.
  if (static_cast<int64_t>(*val_set.size()) < c.world_size())
    throw cohort::ConfigError(c.rank(), "the corpus is too small for --seq-len " + std::to_string(cfg.seq_len) +
                                            " and --batch " + std::to_string(o.batch) + " on " +
                                            std::to_string(c.world_size()) + " ranks");
  if (o.eval_windows < c.world_size())
    throw cohort::ConfigError(c.rank(), "--eval-windows " + std::to_string(o.eval_windows) + " is fewer than the " +
                                            std::to_string(c.world_size()) + " ranks (each evaluates at least one window)");
  cohort::FusedAdamW optimizer(model->parameters(), torch::optim::AdamWOptions(o.lr)
                                                        .betas(std::make_tuple(0.9, 0.95))
                                                        .eps(1e-8)
                                                        .weight_decay(0.0));  // MatrixDecay does it
  const MatrixDecay decay = matrix_decay(model);
  CosineSchedule schedule(o.lr, o.min_lr, o.warmup, o.steps);
  std::unique_ptr<cohort::Checkpointer> checkpoints;
  PeakFlops cpu_peak;
  const auto state = [&] {
    return cohort::TrainingState{&*model, &optimizer, batches.sampler(), batches.states({{"schedule", &schedule}, {"mfu_peak", &cpu_peak}})};
  };
  if (!o.ckpt_dir.empty()) {
    checkpoints = std::make_unique<cohort::Checkpointer>(
        o.ckpt_dir, ctx,
        cohort::CheckpointOptions{.every_steps = o.ckpt_every, .async = !o.ckpt_sync, .snapshot_every_steps = o.snapshot_every,
                                  .snapshot_dir = ""});  // "": COHORT_SNAPSHOT_DIR, from cohort run
  }
  // Under `cohort run --keep-survivors` a peer's failure re-forms the job around its replacement and
  // this runs again, from the newest snapshot; what it needs from the other ranks happens inside.
  const auto train_from_latest = [&]() -> nlohmann::json {
    batches.start();
    if (checkpoints) {
      if (auto r = checkpoints->restore_latest(state()); r && c.rank() == 0)
        std::cout << "resumed from " << r->path << " (step " << r->step << ")" << std::endl;
    }
    const double peak = o.peak_tflops > 0 ? o.peak_tflops * 1e12 * c.world_size()
                        : device.is_cuda() ? 989e12 * c.world_size()
                                           : cpu_peak.get(c);
    const double tokens_per_step = static_cast<double>(o.batch) * o.accum * c.world_size() * cfg.seq_len;

    using clock = std::chrono::steady_clock;
    double timed_s = 0, last_loss = NAN, val_loss = NAN;
    int64_t timed_steps = 0, step = schedule.step();
    const int64_t first_step = step;  // after a restore: where this start begins
    int micro = 0;
    double loss_sum = 0;
    torch::Tensor step_loss;  // this step's loss on the device, read once the optimizer's kernels are queued
    clock::time_point step_start;
    PhaseTimes phases(o.phase_times, device);
    const int64_t last = o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps;  // --stop-at: as if interrupted there
    while (step < last) {
      {
        if (micro == 0) {
          phases.count(step - first_step >= o.warmup_steps);  // the steps the throughput counts
          phases.start();
        }
        // "data": the wait for the batch (a later micro-step's: from its previous backward's end).
        const torch::data::Example<> batch = batches.next();  // into the next epoch at an epoch's end
        phases.end("data");
        if (micro == 0) {
          step_start = clock::now();
          for (auto& group : optimizer.param_groups()) group.options().set_lr(schedule.lr());
          optimizer.zero_grad();
          step_loss = torch::Tensor();
        }
        {
          std::optional<decltype(model->no_sync())> local;  // all but the last micro-step: no communication
          if (micro + 1 < o.accum) local.emplace(model->no_sync());
          torch::Tensor loss;
          {
            auto data = batch.data.to(device), target = batch.target.to(device);
            phases.end("to_device");
            cohort::AutocastGuard autocast(torch::kBFloat16, device.is_cuda() && o.bf16);
            loss = lm_loss(model->forward(data), target) / o.accum;
          }
          phases.end("forward");
          loss.backward();
          phases.end("backward");
          const auto micro_loss = loss.detach().to(torch::kDouble);  // no item() here: on a GPU it would wait for backward
          step_loss = step_loss.defined() ? step_loss + micro_loss : micro_loss;
        }
        if (++micro < o.accum) continue;
        micro = 0;
        const double lr = schedule.lr();
        print_grad_norm(o, c.rank(), step + 1, clip_gradients(model, o.clip));
        phases.end("clip");
        decay.apply(lr, o.weight_decay);
        optimizer.step();
        phases.end("optimizer");
        loss_sum = step_loss.item<double>();
        after_step(model);
        schedule.advance();
        ++step;
        const double seconds = std::chrono::duration<double>(clock::now() - step_start).count();
        if (step - first_step > o.warmup_steps) {  // tokens/s over the steps after this start's warm-up
          ++timed_steps;
          timed_s += seconds;
        }
        const double tps = tokens_per_step / seconds;
        if (o.log_every > 0 && step % o.log_every == 0) {
          last_loss = sum_over_ranks(c, {loss_sum})[0] / c.world_size();  // the job's loss: every rank's batch
          if (c.rank() == 0) std::cout << "step " << step << " loss " << std::setprecision(9) << last_loss << " lr " << lr << std::endl;
        }
        if (checkpoints) checkpoints->maybe_save(state());
        // After maybe_save: a step reported done is then within one step of a committed snapshot.
        cohort::monitor().step(step, {{"loss", loss_sum}, {"lr", lr}, {"tokens_per_s", tps}, {"mfu", tps * cfg.flops_per_token() / peak}});
        if (o.eval_every > 0 && step % o.eval_every == 0) {
          val_loss = evaluate(model, c, val_set, o, device);
          if (c.rank() == 0) std::cout << "step " << step << " val_loss " << val_loss << std::endl;
        }
        if (step >= o.steps) break;
      }
    }
    if (checkpoints) {
      checkpoints->wait();
      // The end state too, so that starting the finished job again resumes at its end.
      if (o.ckpt_every > 0 && step > first_step && step % o.ckpt_every != 0) checkpoints->save(state());
    }
    finish(model);  // DiLoCo: the local steps since the last synchronisation, so that one model is evaluated
    const bool final_eval_due = !(o.eval_every > 0 && step % o.eval_every == 0);
    if (final_eval_due) val_loss = evaluate(model, c, val_set, o, device);
    const double tokens_per_s = timed_s > 0 ? tokens_per_step * timed_steps / timed_s : NAN;
    const std::vector<torch::Tensor> full = full_parameters_of(model);
    nlohmann::json result{{"val_loss", val_loss},
                          {"train_loss", last_loss},
                          {"tokens_per_s", tokens_per_s},
                          {"mfu", tokens_per_s * cfg.flops_per_token() / peak},
                          {"param_checksum", hex16(cohort::tensors_hash(full))},
                          {"world_size", c.world_size()},
                          {"steps", step},
                          {"mode", o.mode},
                          {"parameters", cfg.parameters()},
                          {"unigram_entropy", corpus.unigram_entropy}};
    save_or_compare_params(full, o, c.rank(), result);
    if (o.phase_times) result["phase_ms"] = phases.per_step(timed_steps);
    if (o.sample_tokens > 0 && corpus.prepared) {  // token ids of the data set's tokenizer, decoded
      const std::vector<int64_t> ids = generate_ids(model, cfg, {corpus.val[0].item<int64_t>()}, o.sample_tokens, o.seed, device);
      result["sample"] = decode_tokens(corpus.tokenizer_model, ids);
    } else if (o.sample_tokens > 0) {
      result["sample"] = generate(model, cfg, "\n", o.sample_tokens, o.seed, device);
    }
    return result;
  };
  nlohmann::json result;
  cohort::keep_running(ctx, [&] { result = train_from_latest(); });
  return result;
}