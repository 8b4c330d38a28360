// Published scaling figures and the setups they were measured on, as the simulator's inputs: the
// simulator is judged by how close it comes to them from those inputs alone (docs/sim.md;
// `cohort sim published`; SimPublished in the tests). No torch.
#pragma once

#include <vector>

#include "params.h"

namespace cohort::sim {

struct PublishedFigure {
  const char* source;   // where the figure is published
  const char* model;    // what was trained
  int nodes, gpus_per_node;
  double efficiency;    // the published scaling efficiency (N-GPU throughput / N x one GPU's)
  Params params;        // the setup, as the simulator's parameters (published.cpp says where each comes from)
};

const std::vector<PublishedFigure>& published_figures();
/// The simulated scaling efficiency of a setup: one worker's step alone / the job's mean step.
double simulated_efficiency(const Params& p);

}  // namespace cohort::sim
