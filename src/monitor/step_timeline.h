// monitor/step_timeline.h — the spans of the step in progress, for StepRecord::timeline
// (docs/monitoring.md#the-timeline-panel).
//
// Three sources, each into storage allocated once:
//   * phases: the monitor's marks close a phase span each (the training thread; a fixed array and
//     a relaxed counter: no lock, no allocation — a mark's cost is a clock read and a few stores);
//   * collectives: the flight recorder keeps each ended collective's span (runtime/agent_link,
//     under the mutex it takes anyway) and take() drains them into a fixed scratch array;
//   * everything else — checkpoint capture and write, snapshot copies, recovery — from any thread,
//     rare, through add_span() under a mutex into a fixed array.
// take(), at step(), turns them into TimelineSpans relative to the step's start and resets.
// Times are own-clock nanoseconds (runtime/clock/job_clock.h).
//
// Not here: the JSON (metrics_message.cpp), the clock's offset (job_clock.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "cohort/monitor.h"
#include "runtime/agent_link/flight_recorder.h"

namespace cohort::detail {

class StepTimelineRecorder {
 public:
  StepTimelineRecorder();
  /// Phase `phase` ran from `begin` to `end` (the training thread).
  void phase_span(int phase, int64_t begin, int64_t end) noexcept {
    const int n = phase_count_.load(std::memory_order_relaxed);
    if (n >= kMaxTimelineSpans) {
      phases_truncated_.store(true, std::memory_order_relaxed);
      return;
    }
    phases_[n] = PhaseSpan{phase, begin, end};
    phase_count_.store(n + 1, std::memory_order_relaxed);
  }
  /// A span from any thread; `name` and `cat` static literals; `bytes` -1: none.
  void add_span(const char* name, const char* cat, int64_t begin, int64_t end, int64_t bytes = -1) noexcept;
  /// The step's spans relative to `start_ns` into `out` (phases only when `with_phases`: without a
  /// DDP mark the step's one "data" phase says nothing; collectives of `owner`'s, see
  /// set_span_owner); resets for the next step.
  void take(const void* owner, int64_t start_ns, bool with_phases, StepTimeline& out);

 private:
  struct PhaseSpan {
    int phase;
    int64_t begin, end;
  };
  struct OtherSpan {
    const char* name;
    const char* cat;
    int64_t begin, end, bytes;
  };
  static constexpr int kMaxOther = 64;
  std::array<PhaseSpan, kMaxTimelineSpans> phases_{};
  std::atomic<int> phase_count_{0};
  std::atomic<bool> phases_truncated_{false};
  std::unique_ptr<CommSpan[]> comm_;  // take()'s scratch: kMaxTimelineSpans
  std::mutex mu_;                     // below
  std::array<OtherSpan, kMaxOther> other_{};
  int other_count_ = 0;
  bool other_dropped_ = false;
};

/// Appends `t` as the "timeline" object of docs/monitoring.md#the-timeline-panel.
void append_timeline_json(std::string& out, const StepTimeline& t);

}  // namespace cohort::detail
