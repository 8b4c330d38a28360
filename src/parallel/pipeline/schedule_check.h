// parallel/pipeline/schedule_check.h — the one check every schedule goes through (issue 47): it
// runs the ranks' lists against each other on a clock with given costs, as the executor will run
// them, and says whether they deadlock, break a dependency, or leave work undone; and, when they do
// not, how long the step takes, how long each rank waits (the bubble) and how many microbatches
// each stage keeps stashed.
//
// The model it runs (the executor's): each rank runs its list in order; a compute takes its cost;
// a send takes no time and does not wait for its receive; a receive waits until the matching send
// has run. Each link (sender rank, receiver rank, activations or gradients) is matched in order:
// the k-th receive on it takes the k-th send, which must be the tensor the receive names.
// Dependencies: F of stage s needs the output of F of stage s-1 (on this rank, or received); B or
// BW of stage s needs this rank's F of s and the gradient from stage s+1 (BW or B of s+1 on this
// rank, or received); W needs this rank's B; a send needs the compute that makes its tensor.
// Deterministic: no threads, no timing of this machine.
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace cohort::pipeline {

/// Costs of one compute on one stage (one chunk), in any unit. The defaults are the papers' unit
/// costs: F = B = W = 1 (Qi et al.'s zero-bubble analysis, T_F = T_B = T_W), so a full backward
/// BW = B + W = 2 (Narayanan et al.: backward about twice the forward).
struct Costs {
  double forward = 1;
  double input_grad = 1;
  double weight_grad = 1;
  double full_backward = 2;
};

enum class Problem {
  none,
  placement,   // an action on a rank that does not hold its stage, or a send/receive with no peer
  dependency,  // an action before what it needs, a receive matched to another tensor, a duplicate
  deadlock,    // ranks wait on receives whose sends never run
  incomplete,  // a compute never runs, or a send is never received
};

struct ScheduleReport {
  Problem problem = Problem::none;
  /// One line naming the rank(s), the action, the stage and the microbatch; empty when ok().
  std::string message;

  double makespan = 0;                      // the step: when the last rank's last compute ends
  std::vector<double> busy;                 // per rank: the sum of its computes' costs
  std::vector<double> idle;                 // per rank: makespan - busy
  std::vector<int> peak_stashed;            // per stage: most microbatches past F and before B/BW
  std::vector<int> peak_held;               // per stage: most microbatches past F and before W/BW
  std::vector<std::vector<double>> start;   // per rank, per action: when it started

  bool ok() const { return problem == Problem::none; }
  /// The bubble: all ranks' idle time over p × makespan.
  double idle_fraction() const;
};

/// Runs `schedule` with `costs`; never throws for a bad schedule (the report says what is wrong).
ScheduleReport check_schedule(const Schedule& schedule, const Costs& costs = {});

}  // namespace cohort::pipeline
