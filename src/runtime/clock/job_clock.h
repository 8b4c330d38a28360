// runtime/clock/job_clock.h — the job's one clock, for timelines (docs/monitoring.md#the-timeline-panel).
//
// Every rank stamps its spans with its own clock: steady_clock (CLOCK_MONOTONIC), in nanoseconds,
// plus a shift that only tests set (COHORT_TEST_CLOCK_SHIFT_S, seconds: a rank whose clock is off
// by that much, as another machine's would be). The job clock is rank 0's own clock: each rank's
// offset (job = own + offset) is measured when its process groups connect (clock_sync.h: the
// lowest round trip of several to rank 0, its half as the error) and kept here, process-wide.
// Reading the own clock is one steady_clock read and an add: no lock, no allocation.
//
// Not here: the measurement itself (clock_sync.h, it needs the process group), the spans (monitor).
#pragma once

#include <cstdint>

namespace cohort::detail {

/// This process's own clock in nanoseconds: steady_clock plus the test shift.
int64_t own_clock_ns() noexcept;
/// The test shift in nanoseconds (COHORT_TEST_CLOCK_SHIFT_S; 0 without it).
int64_t own_clock_shift_ns() noexcept;

/// The measured offset of this process's clock against rank 0's.
struct ClockOffset {
  double offset_s = 0;  // added to the own clock (in seconds) gives the job clock
  double error_s = 0;   // the measurement's uncertainty: half the best round trip (0 on rank 0)
  int64_t measured_ns = 0;  // own clock when measured; 0: never (a world of one, or before init)
};

/// Records a measurement (clock_sync.cpp after connecting the groups).
void set_clock_offset(const ClockOffset& offset) noexcept;
/// The latest measurement (offset 0 and error 0 before any).
ClockOffset clock_offset() noexcept;
/// `own_ns` of this process's own clock as job-clock seconds.
double job_seconds(int64_t own_ns) noexcept;

}  // namespace cohort::detail
