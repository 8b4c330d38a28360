// The simulator's memory budget (issue 50). Two outputs grow with the parameters: the series
// (hours x 3600 / sample_s points) and the timeline (timeline_workers x the steps of timeline_s).
// In range they can ask for terabytes (4,096 workers over a 1e6 s window; a point a microsecond for
// 1e5 hours), so their bytes are estimated from the parameters before a step is simulated, and past
// memory_budget_mb the series is sampled coarser and the timeline's window shortened, said in one
// line; a timeline whose single step does not fit is refused, naming timeline_workers. The engine
// also caps the timeline's steps at what the budget holds, so a step shorter than estimated cannot
// overrun it. No torch.
#pragma once

#include <cstddef>
#include <string>

#include "params.h"

namespace cohort::sim {

// Bytes per unit at the peak of `cohort sim run --timeline`, when the engine's storage, the report's
// JSON and its text coexist (measured: tests/unit/sim/sim_budget_test.cpp holds the estimate to the
// real use). The page's core holds the same or less.
constexpr double kSeriesPointBytes = 400;          // a SeriesPoint, its JSON array, its text
constexpr double kTimelineStepBytes = 64;          // a step's record (the engine's)
constexpr double kTimelineWorkerStepBytes = 1600;  // one worker's step: 2 floats, ~5 segments, their JSON and text

struct MemoryPlan {
  double budget_bytes = 0;
  double asked_bytes = 0;      // the series and the timeline as the parameters ask for them
  double planned_bytes = 0;    // ... as planned (at most the budget)
  double sample_s = 0;         // the series' interval (sample_s, or hours/240 for 0, or coarser)
  double timeline_s = 0;       // the timeline's window (timeline_s, or shorter)
  double timeline_steps = 0;   // the most steps the timeline keeps (what its share of the budget holds)
  int timeline_workers = 0;    // workers on the timeline (timeline_workers, at most the world)
  std::string notice;          // one line when something was down-sampled, else empty
  std::string refusal;         // one line when the run cannot fit, else empty
};

/// The plan for a run (or its rest, from `now`, with `points_so_far` series points already kept)
/// whose steps take about `step_s` on `world` workers.
MemoryPlan plan_memory(const Params& p, double step_s, int world, double now = 0, size_t points_so_far = 0);

}  // namespace cohort::sim
