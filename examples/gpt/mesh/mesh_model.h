// The GPT on a device mesh (issue 47): pp × dp × tp ranks (tp innermost), this rank's pipeline
// stages of its tensor-parallel layers, the tied token embedding's two copies, and the things a
// training step needs across the mesh: the global gradient norm and the whole model gathered back
// into the one-process model's order (its checksum, --save-params, --compare-params). It is the
// module a Checkpointer saves (cohort::MeshCheckpointable: --ckpt-dir), restored on any mesh.
#pragma once

#include <cohort/cohort.h>
#include <cohort/device_mesh.h>
#include <cohort/mesh_checkpoint.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mesh/tp_model.h"
#include "options.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/tied.h"

namespace gpt_mesh {

/// The --schedule value as the pipeline's name ("interleaved" is interleaved 1F1B, "zbh1" ZB-H1).
cohort::pipeline::ScheduleKind schedule_kind(const std::string& name, int rank);

/// Refuses what the mesh cannot run, before any group is made: one line naming the rank and the
/// numbers (tp·pp·dp against the world, heads, vocabulary or MLP width against tp, layers against
/// the stages, microbatches against the schedule, options the mesh does not combine with).
void check_options(const Options& o, int world, int rank);

// A torch Module only so that a Checkpointer's TrainingState can hold it (it registers nothing:
// its parameters are local()'s, which DDP wraps).
class MeshModel : public torch::nn::Module, public cohort::MeshCheckpointable {
 public:
  /// Collective over the job: the mesh, its groups, this rank's layers (from make_gpt's model,
  /// seeded as the one-process run) and the tied embedding's group.
  MeshModel(const std::shared_ptr<cohort::Context>& ctx, const Options& o);

  cohort::DeviceMesh& mesh() { return *mesh_; }
  const cohort::pipeline::Schedule& schedule() const { return schedule_; }
  int pp_rank() const { return pp_rank_; }
  int tp_rank() const { return tp_.rank(); }
  bool last_stage() const { return schedule_.rank_of(schedule_.stages() - 1) == pp_rank_; }
  /// This rank's layers and the tied copy: what DDP wraps and the optimizer steps.
  torch::nn::Sequential& local() { return local_; }
  std::map<int, torch::nn::Sequential>& stages() { return stages_; }

  /// One step's forwards and backwards over `inputs`/`targets` (one per microbatch); the mean loss
  /// on the last stage's ranks, 0 elsewhere. Under sequence parallelism, then the gradients of the
  /// parameters replicated over tp (each saw a tp-th of the positions) summed over tp.
  double run_step(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);
  /// Sums the tied copies' gradients (first and last stage).
  void sum_tied();
  /// The global gradient norm of the one-process model: each parameter counted once (tp shards
  /// summed over tp, replicated ones once, stages summed over pp, the tied embedding once), the
  /// same float operations as clip_grad_norm_queued's at tp = 1. Collective over tp and pp.
  torch::Tensor grad_norm();
  /// Scales this rank's gradients to a global norm of at most `max_norm` (as clip_grad.h).
  void clip(const torch::Tensor& total, double max_norm);
  /// The one-process model's parameters, gathered (over tp) and broadcast (over pp) to every rank.
  std::vector<torch::Tensor> full_parameters();
  /// Mean next-token loss of `batches` [ids, targets] (this dp rank's share), forward only through
  /// the pipeline; the sum and the token count, where the last stage's tp rank 0 lives, else zeros.
  std::pair<double, double> eval_sums(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& batches);

  // cohort::MeshCheckpointable: each parameter by its one-process name and shape, except a qkv
  // weight or bias [3·d, ...], described as [3, d, ...] split over tp along dimension 1 (a tp
  // rank's rows are its heads' q, k and v: regroup_qkv), so that every mesh cuts it alike. The
  // last stage's copy of the tied embedding is restored from the first stage's, never saved.
  const cohort::DeviceMesh& checkpoint_mesh() const override { return *mesh_; }
  std::vector<cohort::MeshParameter> mesh_parameters() override;

 private:
  struct Full {  // a parameter of the one-process model
    std::string name;
    std::vector<int64_t> shape;
    int owner = 0;  // its pipeline rank
    TpLayout layout;
    torch::Tensor local;  // this rank's shard or copy, where this rank is its owner
  };
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& target) const;
  int64_t rank_ = 0;
  GptConfig cfg_;
  torch::Dtype dtype_ = torch::kFloat;  // the parameters' (--double: kDouble)
  bool sp_ = false;                     // --sequence-parallel
  std::unique_ptr<cohort::DeviceMesh> mesh_;
  cohort::pipeline::Schedule schedule_;
  int pp_rank_ = 0;
  TpGroup tp_;
  std::map<int, torch::nn::Sequential> stages_;
  torch::nn::Sequential local_;
  torch::Tensor tied_;  // this rank's token embedding where it holds the first or the last stage
  std::unique_ptr<cohort::pipeline::TiedGradients> tied_grads_;
  std::vector<Full> full_;
};

}  // namespace gpt_mesh
