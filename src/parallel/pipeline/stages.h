// parallel/pipeline/stages.h — a model's stages for a pipeline (issue 47): a torch::nn::Sequential
// of L layers cut into S = p·v runs of L/S consecutive layers; stage s goes to rank s mod p (the
// schedules' placement, schedule.h). The stages share the model's layers (no copies), named by their
// index in the model, so that a rank's parameters are the model's under the same names.
// Not here: cuts by cost rather than count, tied layers (the embedding and the output head).
#pragma once

#include <torch/torch.h>

#include <map>

#include "parallel/pipeline/schedule.h"

namespace cohort::pipeline {

/// The stages of `model` that `schedule` places on pipeline rank `rank`, by global stage number.
/// Throws ConfigError — one line naming `job_rank` (when >= 0), the layers and the stages — when
/// the layers do not divide into the schedule's stages.
std::map<int, torch::nn::Sequential> stages_of_rank(const torch::nn::Sequential& model, const Schedule& schedule,
                                                    int rank, int job_rank = -1);

}  // namespace cohort::pipeline
