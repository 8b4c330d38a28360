// stages_of_rank(): consecutive layers per stage, equal counts (stages.h).
#include "parallel/pipeline/stages.h"

#include <string>

#include "cohort/error.h"

namespace cohort::pipeline {

std::map<int, torch::nn::Sequential> stages_of_rank(const torch::nn::Sequential& model, const Schedule& schedule,
                                                    int rank, int job_rank) {
  const int64_t layers = static_cast<int64_t>(model->size()), stages = schedule.stages();
  if (layers == 0 || layers % stages != 0)
    throw ConfigError(job_rank, "pipeline: the model's " + std::to_string(layers) + " layers do not divide into " +
                                    std::to_string(stages) + " stages (" + std::to_string(schedule.ranks) +
                                    " pipeline ranks x " + std::to_string(schedule.stages_per_rank) +
                                    " stages per rank); give a layer count that is a multiple of the stages");
  const int64_t per_stage = layers / stages;
  std::map<int, torch::nn::Sequential> out;
  for (int s = rank; s < stages; s += schedule.ranks) {
    torch::nn::Sequential stage;
    auto layer = model->begin() + s * per_stage;  // AnyModules: the same layers, not copies
    for (int64_t i = s * per_stage; i < (s + 1) * per_stage; ++i, ++layer) stage->push_back(std::to_string(i), *layer);
    out[s] = stage;
  }
  return out;
}

}  // namespace cohort::pipeline
