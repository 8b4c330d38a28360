// parallel/pipeline/executor.h — runs one rank's list of a pipeline schedule (schedule.h) for one
// training step (issue 47): its stages' forwards and backwards over the microbatches, the
// activations and their gradients sent and received over the pipeline's process group. The same
// list check_schedule() proved free of deadlocks is what runs here, action by action.
//
// Transfers: each send is a small header — the stage and microbatch it carries, dtype, shape — then
// the tensor, on one Gloo tag per link kind (activations 0, gradients 1), so that each link
// delivers in order as the checker assumes. A receiver checks the header against the action it is
// running: ranks that run different schedules fail with a line naming both tensors, not a wrong
// gradient. Sends are posted and waited for, in order, on a thread of the step's own; the step ends
// when all have completed. Each send and receive is a comm span of the step's timeline (executor.cpp).
// The zero-bubble split: B is autograd's gradient of the stage's input alone (keeping the graph);
// W is a second backward into the stage's parameters only. Correct, but W walks the stage's graph
// again: the cost is not yet the paper's. Not here: stages from a model, tied weights, data
// parallelism across pipelines (a dp group's allreduce after the step does that).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <vector>

#include "cohort/torch_compat.h"
#include "parallel/pipeline/schedule.h"

namespace cohort::pipeline {

/// The loss of one microbatch, from the last stage's output and the microbatch's target.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

struct StepData {
  std::vector<at::Tensor> inputs;   // per microbatch: stage 0's input (read where stage 0 lives)
  std::vector<at::Tensor> targets;  // per microbatch: the target (read where the last stage lives)
};

/// Runs `rank`'s list of `schedule` once over `group`, whose rank r is pipeline rank r. `stages`
/// holds this rank's stages by their global number. Each microbatch's loss is divided by m before
/// its backward, so the gradients accumulated into the stages' parameters are those of the mean
/// loss over the microbatches (gradient accumulation; the caller zeroes them between steps).
/// Returns that mean loss where the last stage lives, 0 elsewhere. Throws ConfigError when a stage
/// or a microbatch's data is missing or a received tensor is not the one the list expects (ranks
/// running different schedules), CommError when a transfer fails; both name the rank, the stage
/// and the microbatch.
double run_schedule(const Schedule& schedule, int rank, std::map<int, torch::nn::Sequential>& stages,
                    Backend& group, const StepData& data, const LossFn& loss);

}  // namespace cohort::pipeline
