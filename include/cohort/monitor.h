// cohort/monitor.h — telling cohort how far training got.
//
//   for (...) { ...; optimizer.step(); cohort::report_step(++step); }
//
// Under `cohort run` a background thread of the worker sends the step, with the count of
// DistributedDataParallel iterations and completed collectives, to its agent about once a second;
// with --hang-timeout the agent restarts a job whose workers stop advancing (docs/launcher.md,
// Hangs). DDP counts its iterations by itself, so a DDP program need not call this; a program
// without DDP, or one with long phases between DDP steps (evaluation, a synchronous checkpoint),
// calls it to show that it is alive — every call counts as progress, also with the same step.
// Outside `cohort run` it only stores a number.
// (The monitoring issue grows this header into cohort::monitor().step({{"loss", ...}}), which will
// report the step the same way.)
#pragma once

#include <cstdint>

namespace cohort {

/// Records that training reached `step`. Cheap: two relaxed atomic stores; never blocks.
void report_step(int64_t step);

}  // namespace cohort
