// train_mesh() (mesh_train.h): the loop of train.h for a model on a device mesh.
#include "mesh/mesh_train.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "mesh/mesh_model.h"
#include "train.h"  // CosineSchedule, MatrixDecay, hex16, the test outputs

namespace {

// A Context of this rank's dp slice, for DDP: its own Gloo group under the slice's store prefix.
// No shared-memory allreduce (several slices share the machine) and no hierarchy.
std::shared_ptr<cohort::Context> dp_context(cohort::Context& ctx, cohort::DeviceMesh& mesh) {
  cohort::JobEnv env = ctx.env();
  env.rank = env.local_rank = mesh.coordinate("dp");
  env.world_size = mesh.size("dp");
  env.local_world_size = 1;
  cohort::InitOptions options = ctx.options();
  options.shm_allreduce = false;
  const auto store = c10::make_intrusive<c10d::PrefixStore>("gpt/mesh/dp/" + std::to_string(mesh.slice_ranks("dp")[0]) + "/",
                                                            ctx.store());
  return std::make_shared<cohort::Context>(env, store, options);
}

}  // namespace

nlohmann::json train_mesh(const std::shared_ptr<cohort::Context>& ctx, const Corpus& corpus, const Options& o) {
  cohort::Context& c = *ctx;
  const GptConfig& cfg = o.model;
  gpt_mesh::MeshModel model(ctx, o);
  cohort::DeviceMesh& mesh = model.mesh();
  const int dp = mesh.size("dp"), dp_rank = mesh.coordinate("dp"), m = model.schedule().microbatches;
  TokenWindows train_set(corpus.train, cfg.seq_len), val_set(corpus.val, cfg.seq_len);
  if (static_cast<int64_t>(*train_set.size()) < int64_t{dp} * o.batch * m || static_cast<int64_t>(*val_set.size()) < dp)
    throw cohort::ConfigError(c.rank(), "the corpus is too small for --seq-len " + std::to_string(cfg.seq_len) + ", --batch " +
                                            std::to_string(o.batch) + " and " + std::to_string(m) + " microbatches on " +
                                            std::to_string(dp) + " dp ranks");

  // DDP over the dp slice: every backward of the schedule under no_sync, then one synchronised
  // backward that adds zeros to every gradient (exact) and averages the accumulated sums.
  std::shared_ptr<cohort::Context> dp_ctx;
  std::optional<Ddp> ddp;
  if (dp > 1) {
    dp_ctx = dp_context(c, mesh);
    cohort::DDPOptions options;
    options.allreduce = cohort::AllreduceAlgo::flat;
    ddp.emplace(model.local(), dp_ctx, options);
  }
  const auto params = model.local()->parameters();
  cohort::DistributedSampler sampler(*train_set.size(), dp_rank, dp, {.shuffle = true, .seed = o.seed});
  cohort::FusedAdamW optimizer(params, torch::optim::AdamWOptions(o.lr).betas(std::make_tuple(0.9, 0.95)).eps(1e-8).weight_decay(0.0));
  MatrixDecay decay;
  for (const auto& p : params)
    if (p.dim() >= 2) decay.params.push_back(p), decay.masks.emplace_back();
  CosineSchedule schedule(o.lr, o.min_lr, o.warmup, o.steps);
  auto loader = torch::data::make_data_loader(train_set, sampler, torch::data::DataLoaderOptions(o.batch));

  // --ckpt-dir: the model's pieces with AdamW's state (MeshModel is a cohort::MeshCheckpointable),
  // the sampler's position and the schedule; restored on whatever mesh this run has.
  std::unique_ptr<cohort::Checkpointer> checkpoints;
  const cohort::TrainingState state{&model, &optimizer, &sampler, {{"schedule", &schedule}}};
  if (!o.ckpt_dir.empty()) {
    checkpoints = std::make_unique<cohort::Checkpointer>(o.ckpt_dir, ctx,
                                                         cohort::CheckpointOptions{.every_steps = o.ckpt_every, .async = !o.ckpt_sync});
    if (auto r = checkpoints->restore_latest(state); r && c.rank() == 0)
      std::cout << "resumed from " << r->path << " (step " << r->step << ", saved by " << r->saved_world_size << " ranks)" << std::endl;
  }

  using clock = std::chrono::steady_clock;
  const double tokens_per_step = static_cast<double>(o.batch) * m * dp * cfg.seq_len;
  double timed_s = 0, last_loss = NAN;
  int64_t timed_steps = 0, step = schedule.step();
  const int64_t first_step = step, last = o.stop_at > 0 ? std::min(o.stop_at, o.steps) : o.steps;  // --stop-at: as if interrupted
  std::vector<torch::Tensor> inputs, targets;
  for (int64_t epoch = sampler.epoch(); step < last; ++epoch) {  // a restored epoch continues where it was
    sampler.set_epoch(epoch);
    for (auto& batch : *loader) {
      inputs.push_back(batch.data);
      targets.push_back(batch.target);
      if (static_cast<int>(inputs.size()) < m) continue;
      const auto start = clock::now();
      const double lr = schedule.lr();
      for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
      optimizer.zero_grad();
      double loss = 0;
      {
        std::optional<cohort::NoSyncGuard> local;
        if (ddp) local.emplace((*ddp)->no_sync());
        loss = model.run_step(inputs, targets);
      }
      model.sum_tied();
      if (ddp) {
        std::vector<torch::Tensor> zeros;
        for (const auto& p : params) zeros.push_back(p.view({-1})[0] * 0);
        torch::stack(zeros).sum().backward();
      }
      const torch::Tensor norm = model.grad_norm();
      print_grad_norm(o, c.rank(), step + 1, norm);
      model.clip(norm, o.clip);
      decay.apply(lr, o.weight_decay);
      optimizer.step();
      schedule.advance();
      ++step;
      inputs.clear();
      targets.clear();
      const double seconds = std::chrono::duration<double>(clock::now() - start).count();
      if (step - first_step > o.warmup_steps) ++timed_steps, timed_s += seconds;
      // The job's loss: each dp rank's, from its last stage's tp rank 0.
      const bool reports = model.last_stage() && model.tp_rank() == 0;
      const double job_loss = sum_over_ranks(c, {reports ? loss : 0.0})[0] / dp;
      if (o.log_every > 0 && step % o.log_every == 0) {
        last_loss = job_loss;
        if (c.rank() == 0) std::cout << "step " << step << " loss " << std::setprecision(9) << job_loss << " lr " << lr << std::endl;
      }
      if (checkpoints) checkpoints->maybe_save(state);
      cohort::monitor().step(step, {{"loss", job_loss}, {"lr", lr}, {"tokens_per_s", tokens_per_step / seconds}});
      if (step >= last) break;
    }
  }
  if (checkpoints) {
    checkpoints->wait();
    // The end state too, so that starting the finished job again resumes at its end.
    if (o.ckpt_every > 0 && step > first_step && step % o.ckpt_every != 0) checkpoints->save(state);
  }

  // The validation loss: this dp rank's share of the windows, forward only through the pipeline.
  const int64_t n = std::min<int64_t>(o.eval_windows, static_cast<int64_t>(*val_set.size())) / dp * dp;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int64_t first = dp_rank; first < n; first += int64_t{dp} * o.batch) {
    std::vector<size_t> idx;
    for (int64_t i = first; i < n && static_cast<int64_t>(idx.size()) < o.batch; i += dp) idx.push_back(static_cast<size_t>(i));
    auto b = val_set.get_batch(idx);
    batches.emplace_back(b.data, b.target);
  }
  const auto [sum, tokens] = model.eval_sums(batches);
  const auto total = sum_over_ranks(c, {sum, tokens});
  const std::vector<torch::Tensor> full = model.full_parameters();
  nlohmann::json result{{"val_loss", total[1] > 0 ? total[0] / total[1] : NAN},
                        {"train_loss", last_loss},
                        {"tokens_per_s", timed_s > 0 ? tokens_per_step * timed_steps / timed_s : NAN},
                        {"param_checksum", hex16(cohort::tensors_hash(full))},
                        {"world_size", c.world_size()},
                        {"steps", step},
                        {"mode", o.mode},
                        {"tp", mesh.size("tp")},
                        {"pp", mesh.size("pp")},
                        {"dp", dp},
                        {"schedule", cohort::pipeline::schedule_name(model.schedule().kind)},
                        {"virtual_stages", model.schedule().stages_per_rank},
                        {"microbatches", m},
                        {"sequence_parallel", o.sequence_parallel},
                        {"parameters", cfg.parameters()},
                        {"unigram_entropy", corpus.unigram_entropy}};
  save_or_compare_params(full, o, c.rank(), result);
  return result;
}
