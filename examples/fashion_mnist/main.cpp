// fashion_mnist: trains a CNN (or an MLP) on Fashion-MNIST with cohort's DistributedSampler and
// DistributedDataParallel. Run it on several ranks with torchrun-style variables, e.g.
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./fashion_mnist &
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./fashion_mnist
// It ends with one JSON line per rank: test_accuracy, samples_per_s (whole job, after the warm-up
// steps, evaluation excluded), step_ms_median (the median timed step on this rank), world_size,
// steps, final_loss, param_checksum and optimizer_checksum.
// Each step goes to cohort::monitor() with its loss and learning rate (under `cohort run`: the
// dashboard, /metrics, the run's events.jsonl). Test-only flags inject faults the monitoring must
// catch: --inject-nan-step/--inject-nan-rank (a NaN loss, so NaN gradients), --slow-rank/--slow-ms
// (a straggler in its data phase); --on-nan stop|skip|warn sets the NaN policy.
// With --ckpt-dir it checkpoints every --ckpt-every steps (in the background unless --ckpt-sync)
// and, when started again with the same directory, resumes from the newest valid checkpoint:
// the same step, epoch position, parameters, momentum and RNG state, also on another world size.
// --snapshot-every N adds in-memory snapshots (under cohort run): a restart then loses at most one step.
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "cli_checks.h"  // examples::kFinite, examples::parse_command_line
#include "error_line.h"  // examples::error_line
#include "fashion_mnist_data.h"
#include "models.h"
#include "sample_log.h"

namespace {

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  int epochs = 5;
  int64_t max_steps = 0;  // 0: no limit
  int batch_size = 64;    // per rank
  double lr = 0.02;
  double momentum = 0.9;
  std::string optimizer = "fused_sgd";  // or "sgd": libtorch's, the same results bitwise (fused_sgd.h)
  uint64_t seed = 0;
  int threads = 0;        // 0: COHORT_THREADS, else cores / local ranks
  int warmup_steps = 10;
  double bucket_cap_mb = 25;
  bool reference = false;
  std::string comm_hook = "none";  // cohort/comm_hook.h: none, fp16, bf16, powersgd
  int powersgd_rank = 4;
  int64_t powersgd_start = 10;     // steps of plain allreduce before PowerSGD compresses
  std::string allreduce = "automatic";  // or flat, hierarchical (cohort::AllreduceAlgo)
  int64_t local_sgd = 0;           // cohort/local_sgd.h: synchronise the parameters every H steps (0: DDP)
  std::string outer = "average";   // local SGD: average, or nesterov (DiLoCo)
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool no_eval = false;
  bool plain = false;
  int log_every = 100;
  std::string ckpt_dir;    // empty: no checkpoints
  int64_t ckpt_every = 0;  // steps; 0 with a directory: only restore
  int ckpt_keep = 3;
  bool ckpt_sync = false;
  int64_t snapshot_every = 0;  // in-memory snapshots every N steps (0: none)
  bool report_first_step = false;  // recovery-time benchmark: when did this start's first step end?
  std::string log_samples;   // empty: no sample log (sample_log.h)
  int64_t train_limit = 0;   // train on the first N samples only (0: all)
  // Fault injection for the monitoring tests (docs/monitoring.md).
  int64_t inject_nan_step = 0;  // multiply the loss by NaN at this step (0: never) ...
  int inject_nan_rank = 0;      // ... on this rank
  int slow_rank = -1;           // this rank sleeps slow_ms per step before its forward (data phase)
  bool no_keep_running = false;  // train outside cohort::keep_running() (test: --keep-survivors falls back)
  int slow_ms = 0;
  std::string on_nan;           // stop, skip or warn: overrides COHORT_ON_NAN
};

double evaluate(torch::nn::Module& net, const std::function<torch::Tensor(torch::Tensor)>& forward,
                const FashionMnist& test) {
  torch::NoGradGuard no_grad;
  net.eval();
  int64_t correct = 0;
  const int64_t n = test.images().size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    auto x = test.images().narrow(0, i, std::min<int64_t>(1000, n - i));
    auto y = test.labels().narrow(0, i, x.size(0));
    correct += forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  net.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

// The training loop, the same with and without cohort: `forward` is the DDP module's or the
// plain module's; `world` and `rank` are 1 and 0 for a plain run.
struct Outcome {
  int64_t steps = 0;
  double last_loss = 0, samples_per_s = 0;
  // The median of the timed steps' wall times: unlike samples_per_s, not moved by the few steps
  // during which another process took a core (benchmarks compare small costs with it).
  double step_ms_median = 0;
  // The job's loss (the last step's, averaged over ranks) when it was restored from a checkpoint
  // and no step followed: a restart after the final save trains nothing and reports this.
  std::optional<double> job_loss;
  std::string optimizer_checksum;
  // Sum of each phase over the timed steps (cohort::monitor()'s marks; empty without DDP).
  std::array<double, cohort::kPhaseCount> phase_s{};
  uint8_t phase_mask = 0;
};

// Fingerprint of the SGD momentum buffers, to compare resumed and uninterrupted runs.
std::string momentum_checksum(torch::optim::SGD& optimizer) {
  std::vector<torch::Tensor> buffers;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (auto* state = cohort::optimizer_state_of(optimizer, p))
        buffers.push_back(static_cast<torch::optim::SGDParamState&>(*state).momentum_buffer());
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(cohort::tensors_hash(buffers)));
  return hex;
}

// A double as text that reads back bit for bit (17 significant digits).
std::string exact_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// `after_step` runs after each optimizer step (local SGD counts its steps there); `job_mean`
// averages a number over the ranks (a collective).
template <typename Forward>
Outcome train_loop(const Flags& flags, FashionMnist& train_set, cohort::DistributedSampler& sampler,
                   torch::nn::Module& module, Forward forward, int rank, int world, cohort::Checkpointer* checkpoints,
                   const std::function<double(double)>& job_mean, const std::function<void()>& after_step = [] {}) {
  SampleLog sample_log(flags.log_samples, rank, world);  // --log-samples: which samples each step used
  auto loader = torch::data::make_data_loader(train_set, sample_log.sampler(sampler),
                                              torch::data::DataLoaderOptions(flags.batch_size));
  const auto sgd_options = torch::optim::SGDOptions(flags.lr).momentum(flags.momentum);
  std::unique_ptr<torch::optim::SGD> sgd = flags.optimizer == "sgd"
                                               ? std::make_unique<torch::optim::SGD>(module.parameters(), sgd_options)
                                               : std::make_unique<cohort::FusedSGD>(module.parameters(), sgd_options);
  torch::optim::SGD& optimizer = *sgd;
  using clock = std::chrono::steady_clock;
  Outcome out;
  if (checkpoints) {
    if (auto restored = checkpoints->restore_latest(module, optimizer, sampler)) {
      out.steps = restored->step;
      if (auto it = restored->metadata.find("job_loss"); it != restored->metadata.end())
        out.job_loss = std::strtod(it->second.c_str(), nullptr);
      if (rank == 0)
        std::cout << "resumed from " << restored->path << " (step " << restored->step << ", epoch " << restored->epoch
                  << ", saved by " << restored->saved_world_size << " ranks)" << std::endl;
    }
  }
  const int64_t first_step = out.steps;
  sample_log.started(first_step);
  clock::time_point timer_start, last_step_end;
  std::vector<double> step_ms;  // each timed step's wall time
  if (flags.warmup_steps == 0) timer_start = last_step_end = clock::now();  // every step is timed
  bool done = flags.max_steps > 0 && out.steps >= flags.max_steps;  // resumed at or after the last step
  // Before each save: the job's loss at its step, which a restart at the very end reports (every
  // rank calls this at the same steps, as it is a collective).
  const auto note_job_loss = [&] { checkpoints->metadata()["job_loss"] = exact_text(job_mean(out.last_loss)); };
  for (int epoch = static_cast<int>(sampler.epoch()); epoch < flags.epochs && !done; ++epoch) {
    sampler.set_epoch(epoch);
    for (auto& batch : *loader) {
      if (rank == flags.slow_rank && flags.slow_ms > 0)  // an injected straggler: slow "data loading"
        std::this_thread::sleep_for(std::chrono::milliseconds(flags.slow_ms));
      optimizer.zero_grad();
      auto loss = torch::nll_loss(forward(batch.data), batch.target);
      if (flags.inject_nan_step > 0 && out.steps + 1 == flags.inject_nan_step && rank == flags.inject_nan_rank)
        loss = loss * std::numeric_limits<double>::quiet_NaN();  // its gradients become NaN too
      loss.backward();  // with DDP, gradients are averaged across ranks here
      optimizer.step();
      after_step();
      out.last_loss = loss.template item<double>();
      ++out.steps;
      sample_log.step(out.steps, epoch);  // before the checkpoint that may cover this step
      if (flags.report_first_step && rank == 0 && out.steps == first_step + 1) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch());
        std::cout << "first_step_unix_ns " << ns.count() << " step " << out.steps << std::endl;
      }
      if (checkpoints) {
        // maybe_save saves now (or snapshots the last step, which a restart at the very end reports)
        if ((flags.ckpt_every > 0 && out.steps % flags.ckpt_every == 0) ||
            (flags.snapshot_every > 0 && out.steps == flags.max_steps))
          note_job_loss();
        checkpoints->maybe_save(module, optimizer, sampler);
      }
      // Step time and its phases, samples/s, gradient norm, memory, communication: to the agent.
      // After maybe_save: a step reported done is then within one step of a committed snapshot.
      cohort::monitor().step(out.steps, {{"loss", out.last_loss}, {"lr", flags.lr}});
      sample_log.done(out.steps);
      const clock::time_point step_end = clock::now();
      if (out.steps - first_step == flags.warmup_steps) timer_start = step_end;
      if (out.steps - first_step > flags.warmup_steps) {
        step_ms.push_back(std::chrono::duration<double, std::milli>(step_end - last_step_end).count());
        if (const auto record = cohort::monitor().last()) {
          for (int p = 0; p < cohort::kPhaseCount; ++p) out.phase_s[p] += record->phase_s[p];
          out.phase_mask |= record->phase_mask;
        }
      }
      last_step_end = step_end;
      if (rank == 0 && flags.log_every > 0 && out.steps % flags.log_every == 0) {
        std::cout << "epoch " << epoch << " step " << out.steps << " loss " << out.last_loss << std::endl;
      }
      if (flags.max_steps > 0 && out.steps >= flags.max_steps) {
        done = true;
        break;
      }
    }
  }
  if (const auto timed_steps = static_cast<double>(step_ms.size()); timed_steps > 0) {
    const double seconds = std::chrono::duration<double>(clock::now() - timer_start).count();
    out.samples_per_s = timed_steps * flags.batch_size * world / seconds;
    for (double& s : out.phase_s) s /= timed_steps;
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    out.step_ms_median = step_ms[step_ms.size() / 2];
  }
  if (checkpoints) {
    checkpoints->wait();  // a save in flight is finished (and its failure reported) here
    // The end state too, so that starting the finished job again resumes at its end.
    if (flags.ckpt_every > 0 && out.steps > first_step && out.steps % flags.ckpt_every != 0) {
      note_job_loss();
      checkpoints->save(module, optimizer, sampler);
    }
  }
  if (out.steps > first_step) out.job_loss.reset();  // trained on: the last step's loss counts
  out.optimizer_checksum = momentum_checksum(optimizer);
  return out;
}

void set_threads(const Flags& flags, int local_world_size) {
  int threads = flags.threads;
  if (threads <= 0) {
    const char* env = std::getenv("COHORT_THREADS");  // set by `cohort run --threads-per-proc`
    threads = env ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency()) / local_world_size;
  }
  cohort::set_num_threads(std::max(1, threads));  // libtorch's and OpenBLAS's threads
}

// Under `cohort run --keep-survivors` a peer's failure re-forms the job around its replacement and
// the loop starts again from the newest snapshot (train_loop restores it first).
void train_body(const Flags& flags, const std::shared_ptr<cohort::Context>& ctx, const std::function<void()>& body) {
  if (flags.no_keep_running) {
    body();
  } else {
    cohort::keep_running(ctx, body);
  }
}

template <typename Net>
int train(const Flags& flags, Net net) {
  // The training set before init(): a warm spare (cohort run --warm-spares) has it loaded by the
  // time its round begins. Its rank (for messages) comes from the same variables init() reads.
  FashionMnist train_set(flags.data, /*train=*/true, flags.plain ? 0 : cohort::resolve_job_env().rank);
  std::shared_ptr<cohort::Context> ctx;
  if (!flags.plain) {
    ctx = cohort::init();
  } else {
    // The plain process keeps init()'s malloc settings too: without them glibc hands each step's
    // freed activations back to the kernel and faults them in again, ~18 % of a CNN step here
    // (docs/BENCHMARKS.md, "The plain CNN process"), and the baseline would measure that instead.
    cohort::retain_freed_memory();
  }
  const int rank = ctx ? ctx->rank() : 0;
  const int world = ctx ? ctx->world_size() : 1;
  set_threads(flags, ctx ? ctx->local_world_size() : 1);

  size_t train_size = train_set.size().value();
  if (flags.train_limit > 0) train_size = std::min<size_t>(train_size, static_cast<size_t>(flags.train_limit));
  cohort::DistributedSampler sampler(train_size, rank, world, {.shuffle = true, .seed = flags.seed});

  std::unique_ptr<cohort::Checkpointer> checkpoints;
  if (!flags.plain && !flags.ckpt_dir.empty()) {
    cohort::CheckpointOptions options;
    options.every_steps = flags.ckpt_every;
    options.keep_last = flags.ckpt_keep;
    options.async = !flags.ckpt_sync;
    options.snapshot_every_steps = flags.snapshot_every;
    checkpoints = std::make_unique<cohort::Checkpointer>(flags.ckpt_dir, ctx, options);
  }
  const std::function<double(double)> job_mean = [&](double value) {
    if (!ctx) return value;
    std::vector<torch::Tensor> v{torch::tensor({value / world}, torch::kDouble)};
    ctx->group()->allreduce(v)->wait();
    return v[0].item<double>();
  };
  Outcome outcome;
  nlohmann::json result = {{"rank", rank}, {"world_size", world}, {"model", flags.model}};
  if (flags.plain) {
    // One process without cohort's runtime: the baseline for scaling efficiency.
    outcome = train_loop(flags, train_set, sampler, *net, [&](torch::Tensor x) { return net->forward(x); }, rank, world,
                         nullptr, job_mean);
    result["plain"] = true;
  } else if (flags.local_sgd > 0) {
    cohort::LocalSGDOptions options;
    options.sync_every = flags.local_sgd;
    options.outer = flags.outer == "nesterov" ? cohort::OuterOptimizer::nesterov : cohort::OuterOptimizer::average;
    options.outer_lr = flags.outer_lr;
    options.outer_momentum = flags.outer_momentum;
    auto model = cohort::LocalSGD(net, ctx, options);
    train_body(flags, ctx, [&] {
      outcome = train_loop(flags, train_set, sampler, *model, [&](torch::Tensor x) { return model->forward(x); },
                           rank, world, checkpoints.get(), job_mean, [&] { model->step(); });
    });
    model->finish();  // the local steps since the last synchronisation too: one model to evaluate
    result["local_sgd"] = {{"sync_every", flags.local_sgd}, {"outer", flags.outer}, {"syncs", model->stats().syncs}};
  } else {
    cohort::DDPOptions ddp_options;
    ddp_options.bucket_cap_mb = flags.bucket_cap_mb;
    ddp_options.reference_mode = flags.reference;
    cohort::PowerSGDOptions powersgd;
    powersgd.rank = flags.powersgd_rank;
    powersgd.start_step = flags.powersgd_start;
    ddp_options.comm_hook = cohort::comm_hook_by_name(flags.comm_hook, powersgd);
    ddp_options.allreduce = flags.allreduce == "flat"           ? cohort::AllreduceAlgo::flat
                            : flags.allreduce == "hierarchical" ? cohort::AllreduceAlgo::hierarchical
                                                                : cohort::AllreduceAlgo::automatic;
    auto model = cohort::DistributedDataParallel(net, ctx, ddp_options);
    train_body(flags, ctx, [&] {
      outcome = train_loop(flags, train_set, sampler, *model, [&](torch::Tensor x) { return model->forward(x); },
                           rank, world, checkpoints.get(), job_mean);
    });
    model->assert_in_sync();
    result["allreduce"] = model->stats().hierarchical ? "hierarchical" : "flat";  // what automatic chose
  }
  // The job's loss: the last step's loss averaged over ranks.
  outcome.last_loss = outcome.job_loss ? *outcome.job_loss : job_mean(outcome.last_loss);
  double accuracy = -1;
  if (!flags.no_eval) {  // read only now: a restarted worker gets to its first step sooner
    FashionMnist test_set(flags.data, /*train=*/false, rank);
    accuracy = evaluate(*net, [&](torch::Tensor x) { return net->forward(x); }, test_set);
  }
  result["steps"] = outcome.steps;
  result["final_loss"] = outcome.last_loss;
  result["test_accuracy"] = accuracy;
  result["samples_per_s"] = outcome.samples_per_s;
  result["step_ms_median"] = outcome.step_ms_median;
  if (flags.comm_hook != "none") result["comm_hook"] = flags.comm_hook;
  result["param_checksum"] = cohort::parameters_checksum(*net);
  if (cohort::rejoins() > 0) result["rejoins"] = cohort::rejoins();  // peers replaced while this process ran
  result["optimizer_checksum"] = outcome.optimizer_checksum;
  if (const int64_t skipped = cohort::monitor().skipped_steps(); skipped > 0) result["nan_skipped_steps"] = skipped;
  for (int p = 0; p < cohort::kPhaseCount; ++p)  // where a timed step's time went, on this rank (ms)
    if (outcome.phase_mask & (1u << p))
      result["phase_ms"][cohort::to_string(static_cast<cohort::Phase>(p))] = outcome.phase_s[p] * 1e3;
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN or MLP on Fashion-MNIST with cohort (data parallel)"};
  Flags f;
  app.add_option("--data", f.data, "Directory with the (gzipped) IDX files, or with train/ and t10k/ from `cohort data prepare --idx` (docs/data.md)")->capture_default_str();
  app.add_option("--model", f.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}))->capture_default_str();
  app.add_option("--epochs", f.epochs, "Epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-steps", f.max_steps, "Stop after this many steps (0: no limit)")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", f.batch_size, "Batch size per rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", f.lr, "Learning rate")->check(examples::kFinite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->check(examples::kFinite)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "fused_sgd (cohort::FusedSGD, one pass) or sgd (torch::optim::SGD); bitwise the same")
      ->check(CLI::IsMember({"fused_sgd", "sgd"}))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "Seed for the model and the sampler")->capture_default_str();
  app.add_option("--threads", f.threads, "Intra-op threads per rank (0: cores / local ranks)")->check(CLI::Range(0, 1024));
  app.add_option("--warmup-steps", f.warmup_steps, "Steps before the throughput timer starts")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP bucket capacity in MiB")
      ->check(examples::kFinite)->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--reference", f.reference, "DDP reference mode: one allreduce per gradient after backward");
  app.add_option("--comm-hook", f.comm_hook, "How DDP averages gradients: none (fp32 allreduce), fp16, bf16, powersgd")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  app.add_option("--allreduce", f.allreduce,
                 "automatic (hierarchical on several nodes of several ranks), flat or hierarchical")
      ->check(CLI::IsMember({"automatic", "flat", "hierarchical"}))
      ->capture_default_str();
  app.add_option("--local-sgd", f.local_sgd,
                 "Local SGD / DiLoCo instead of DDP: synchronise the parameters every H steps (0: DDP)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--outer", f.outer, "Local SGD's synchronisation: average, or nesterov (DiLoCo's outer optimizer)")
      ->check(CLI::IsMember({"average", "nesterov"}))
      ->capture_default_str();
  app.add_option("--outer-lr", f.outer_lr, "DiLoCo: outer learning rate")->check(examples::kFinite)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--outer-momentum", f.outer_momentum, "DiLoCo: outer Nesterov momentum, in [0, 1)")
      ->check(examples::kFinite)->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  app.add_option("--powersgd-rank", f.powersgd_rank, "PowerSGD: rank of the approximation")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--powersgd-start", f.powersgd_start, "PowerSGD: steps of plain allreduce first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-eval", f.no_eval, "Skip the test-set evaluation");
  app.add_flag("--plain", f.plain, "One process without cohort's runtime (no init, no DDP; only its malloc settings): the scaling baseline");
  app.add_option("--log-every", f.log_every, "Print the loss every N steps on rank 0 (0: never)")->check(CLI::NonNegativeNumber);
  auto* ckpt_dir = app.add_option("--ckpt-dir", f.ckpt_dir, "Checkpoint here, and resume from here when restarted");
  app.add_option("--ckpt-every", f.ckpt_every, "Checkpoint every N steps (0: only resume)")
      ->check(CLI::NonNegativeNumber)
      ->needs(ckpt_dir);
  app.add_option("--ckpt-keep", f.ckpt_keep, "Checkpoints kept (the newest N)")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--ckpt-sync", f.ckpt_sync, "Write checkpoints synchronously instead of in the background");
  app.add_option("--snapshot-every", f.snapshot_every,
                 "Also snapshot the training state in memory every N steps (0: never; under cohort run)")
      ->check(CLI::NonNegativeNumber)
      ->needs(ckpt_dir);
  app.add_flag("--report-first-step", f.report_first_step,
               "Print the wall-clock time of the first completed step (rank 0; for bench/launcher/recovery.sh)");
  app.add_option("--log-samples", f.log_samples,
                 "Append each step's sample indices to PREFIX.rank<R> (JSON lines; see sample_log.h)");
  app.add_option("--train-limit", f.train_limit, "Train on the first N samples of the training set (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--inject-nan-step", f.inject_nan_step, "Test: multiply the loss by NaN at this step (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--inject-nan-rank", f.inject_nan_rank, "Test: the rank whose loss --inject-nan-step poisons")
      ->capture_default_str();
  app.add_flag("--no-keep-running", f.no_keep_running,
               "Test: train outside cohort::keep_running() (a peer's failure then restarts the job)");
  app.add_option("--slow-rank", f.slow_rank, "Test: this rank sleeps --slow-ms per step before its forward");
  app.add_option("--slow-ms", f.slow_ms, "Test: milliseconds --slow-rank sleeps per step")->check(CLI::NonNegativeNumber);
  app.add_option("--on-nan", f.on_nan, "NaN/Inf gradient norm or loss: stop, skip or warn (default: COHORT_ON_NAN, else stop)")
      ->check(CLI::IsMember({"stop", "skip", "warn"}));
  if (auto status = examples::parse_command_line(app, argc, argv, "fashion_mnist")) return *status;
  if (!f.on_nan.empty()) {
    cohort::MonitorOptions options = cohort::monitor().options();
    options.on_nan = *cohort::parse_on_nan(f.on_nan);
    cohort::monitor().configure(options);
  }
  if (f.local_sgd > 0 && (f.comm_hook != "none" || f.reference || f.plain)) {
    std::cerr << "fashion_mnist: --local-sgd synchronises parameters, not gradients; it cannot be combined with "
              << (f.plain ? "--plain" : f.reference ? "--reference" : "--comm-hook") << std::endl;
    return 2;
  }
  if (f.plain && !f.ckpt_dir.empty()) {
    std::cerr << "fashion_mnist: --ckpt-dir needs cohort's runtime; it cannot be combined with --plain" << std::endl;
    return 2;
  }

  try {
    torch::manual_seed(f.seed);  // the same initial model on every rank (rank 0's is broadcast anyway)
    if (f.model == "mlp") return train(f, Mlp());
    return train(f, Cnn());
  } catch (const cohort::Error& e) {
    std::cerr << "fashion_mnist: " + std::string(e.what()) + "\n" << std::flush;
    return 2;
  } catch (const std::exception& e) {  // libtorch's errors included, by their first line
    std::cerr << "fashion_mnist: " + examples::error_line(e) + "\n" << std::flush;
    return 1;
  }
}
