// runtime/agent_link/progress.h — how far this process's training got: the counters its heartbeats carry.
//
// Three process-wide counters, each one relaxed atomic store or increment to update:
//   * reported step — the last value passed to cohort::report_step() (cohort/monitor.h), or
//     recorded by cohort::monitor().step(), and how many times it was called (a program that
//     reports the same step again is still alive);
//   * DDP iterations — synchronised backward passes, counted by the grad reducer's finalize;
//   * completed collectives — kept by the flight recorder.
// The agent (cohort run --hang-timeout) treats a worker as progressing while any of them moves.
// Process-wide rather than per Context: a job has one rank per process (tests that run ranks as
// threads share the counters, harmlessly: nothing reads them there).
#pragma once

#include <cstdint>

namespace cohort::detail {

struct Progress {
  int64_t reported_step = -1;  // -1: report_step() never called
  int64_t reports = 0;         // report_step() calls
  int64_t ddp_iterations = 0;
  uint64_t collectives = 0;    // completed collectives (flight recorder)

  /// The step to show: the reported one when the program reports steps, else DDP's iterations.
  int64_t step() const { return reported_step >= 0 ? reported_step : ddp_iterations; }
  /// Training has begun (a step was reported or a DDP iteration finished): from then on a worker
  /// whose counters stand still is hung. Before (loading data, building the model) it is not.
  bool training() const { return reports > 0 || ddp_iterations > 0; }
};

Progress progress();
void note_ddp_iteration();

}  // namespace cohort::detail
