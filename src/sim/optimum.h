// The checkpoint interval that maximises goodput, found by simulating a sweep of intervals, next
// to Young's first-order formula sqrt(2 delta M) (J. W. Young, "A first order approximation to the
// optimum checkpoint interval", CACM 1974; J. T. Daly, FGCS 2006), with delta the training's stall
// per checkpoint and M the job's mean time between failures. No torch.
#pragma once

#include <vector>

#include "params.h"

namespace cohort::sim {

struct IntervalPoint {
  long long every = 0;     // steps between checkpoints
  double interval_s = 0;   // ... in seconds of training
  double goodput = 0;
};

struct Optimum {
  std::vector<IntervalPoint> curve;
  IntervalPoint best;            // the best simulated point
  double best_interval_s = 0;    // refined: the vertex of a parabola fitted around the best
  double young_daly_s = 0;       // sqrt(2 delta M)
  double delta_s = 0;            // stall per checkpoint
  double job_mtbf_s = 0;         // node MTBF / nodes
  double step_s = 0;
  double simulated_hours = 0;
};

/// Needs failures (node_mtbf_h > 0). The sweep runs each interval over enough simulated time for
/// about `failures` failures, with `seeds` seeds averaged, and the compute noise off (the interval
/// depends on the step time, not on its spread).
Optimum optimum_interval(const Params& p, int points = 21, double failures = 400, int seeds = 3);

}  // namespace cohort::sim
