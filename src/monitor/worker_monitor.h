// monitor/worker_monitor.h — the inside of cohort::Monitor (cohort/monitor.h): the phase clock
// that DDP and ShardedDataParallel mark, the gradient-norm check with its NaN policy, and the
// step record that goes to the agent as a "metrics" datagram. Internal header.
//
// Phase clock. A mark closes the phase in progress (adding the time since the previous mark to
// it) and opens the next one; step() closes the last phase and opens "data". The marks:
//   forward begin   DDP forward, before the buffer broadcast          → forward
//   forward end     after the wrapped module's forward                → backward
//   backward end    the reducer's end-of-backward callback begins     → comm_wait
//   comm done       the reducer waited for every bucket               → optimizer
//   step()          closes optimizer (the user's optimizer.step())    → data
// so the phases add up to the step time exactly (they telescope from the previous step()). A
// mark is one steady_clock read and a few relaxed atomic loads and stores: no lock, no
// allocation. Only training forwards mark (grad mode on and the module in training mode), so an
// evaluation inside the loop stays in the phase it happens in. The marks assume one training
// thread per monitor (a rank per process); concurrent marks (ranks as threads sharing one
// monitor) stay well-defined but mix the ranks' times.
//
// Timeline (docs/monitoring.md#the-timeline-panel): each mark also closes a phase span, and step() hands
// the record the step's spans (step_timeline.h) on the job clock (runtime/clock/job_clock.h);
// add_span() takes the rest (checkpoint I/O, recovery). COHORT_TIMELINE=0 leaves it out (for the
// overhead benchmark).
//
// Not here: anything on the agent's side (src/hub/), loss-spike or straggler detection
// (the hub does those: they need all ranks).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/monitor.h"
#include "runtime/worker_identity.h"
#include "runtime/clock/job_clock.h"
#include "step_timeline.h"

namespace cohort::detail {

class StepMonitor {
 public:
  explicit StepMonitor(const MonitorOptions& options);

  void configure(const MonitorOptions& options);
  MonitorOptions options() const;
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Whether the reducers should compute the gradient norm (and apply the NaN policy to it).
  bool wants_grad_norm() const { return enabled() && grad_norm_.load(std::memory_order_relaxed); }

  /// Ranks as threads: each reducer's monitor is told its rank. Without a call the monitor
  /// reports the identity init() recorded for the process (runtime/worker_identity.h).
  void set_identity(int rank, int world_size, int restart_count);
  WorkerIdentity identity() const;
  /// A reducer's parameters live on this CUDA device: the record then carries its memory.
  void note_cuda_device(int index) { cuda_device_.store(index, std::memory_order_relaxed); }

  // --- phase marks -------------------------------------------------------------------------------
  void mark(Phase next) noexcept;
  /// A training forward begins with `samples` rows (<= 0: unknown).
  void forward_begin(int64_t samples) noexcept {
    if (!enabled()) return;
    if (samples > 0) samples_.store(samples_.load(std::memory_order_relaxed) + samples, std::memory_order_relaxed);
    mark(Phase::forward);
  }

  // --- gradients ---------------------------------------------------------------------------------
  /// The global norm of the step's averaged gradients (the same on every rank). Returns true when
  /// the step's gradients must be dropped (on_nan=skip); throws AnomalyError for on_nan=stop.
  bool check_grad_norm(double norm, int rank);
  /// Time the reducer spent on monitoring (the norm): counted in the next record's monitor_s.
  void add_overhead_ns(int64_t ns) { overhead_ns_.fetch_add(ns, std::memory_order_relaxed); }
  /// A communication hook was handed `input` gradient bytes and handed on `output` bytes to its
  /// collectives (the record's compression: input / output).
  void add_hook_bytes(int64_t input, int64_t output) {
    hook_input_bytes_.fetch_add(input, std::memory_order_relaxed);
    hook_output_bytes_.fetch_add(output, std::memory_order_relaxed);
  }

  // --- steps -------------------------------------------------------------------------------------
  void step(std::optional<int64_t> number, std::vector<std::pair<std::string, double>> scalars);
  int64_t current_step() const { return step_.load(std::memory_order_relaxed); }
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  std::optional<StepRecord> last() const;
  int64_t skipped_steps() const { return skipped_total_.load(); }
  int64_t messages_sent() const { return messages_sent_.load(); }

  // --- timeline ----------------------------------------------------------------------------------
  /// A span for the timeline from any thread: `name`, `cat` static literals ("ckpt_write", "io");
  /// times from own_clock_ns() (runtime/clock/job_clock.h); `bytes` -1: none.
  void add_span(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, int64_t bytes = -1);

  // --- events (non-blocking datagrams to the agent; dropped without one) ----------------------------
  /// `fields_json`: a JSON object text (may be empty).
  void send_event(const std::string& kind, int64_t step, const std::string& message, const std::string& fields_json);
  void checkpoint_saved(int64_t step, const std::string& path, int64_t bytes, double seconds);
  void checkpoint_restored(int64_t step, const std::string& path, bool from_snapshot, double seconds);

 private:
  void anomaly(const char* what, double value, int rank, int64_t step);
  int64_t rss_bytes();

  // Phase clock (relaxed atomics: one writer in practice, see above).
  std::atomic<int64_t> last_ns_{0};       // the latest mark; 0: the clock has not started
  std::atomic<int64_t> step_start_ns_{0};
  std::atomic<int> current_{-1};          // the phase in progress; -1: none
  std::atomic<uint32_t> mask_{0};         // phases entered this step
  std::atomic<int64_t> acc_ns_[kPhaseCount] = {};
  std::atomic<int64_t> samples_{0};
  int64_t created_ns_ = 0;
  std::atomic<int64_t> last_cpu_ns_{0};  // the process's CPU time at the previous record
  static bool timeline_from_env();
  const bool timeline_on_;               // COHORT_TIMELINE != 0
  StepTimelineRecorder timeline_;

  std::atomic<bool> enabled_{true};
  std::atomic<bool> grad_norm_{true};
  std::atomic<int> on_nan_{0};
  std::atomic<int> cuda_device_{-1};

  // This step's gradient facts (written by the reducer, taken by step()).
  std::atomic<bool> has_grad_norm_{false};
  std::atomic<double> grad_norm_value_{0};
  std::atomic<bool> skipped_{false};
  std::atomic<bool> grad_anomaly_sent_{false};
  std::atomic<int64_t> hook_input_bytes_{0};
  std::atomic<int64_t> hook_output_bytes_{0};
  std::atomic<int64_t> overhead_ns_{0};  // monitoring's own time since the last record (monitor_s)

  std::atomic<int64_t> step_{0};
  std::atomic<int64_t> skipped_total_{0};
  std::atomic<int64_t> messages_sent_{0};
  std::atomic<int64_t> warnings_{0};

  mutable std::mutex mu_;  // below
  WorkerIdentity identity_;
  bool identity_set_ = false;  // set_identity() was called; else the process's identity
  WorkerIdentity identity_locked() const;
  std::optional<StepRecord> last_;
  int64_t rss_cached_ = 0;
  int64_t rss_read_ns_ = 0;
};

/// A timeline span from construction to destruction (StepMonitor::add_span); `name`, `cat` static
/// literals. A null monitor records nothing.
class MonitorSpan {
 public:
  MonitorSpan(StepMonitor* monitor, const char* name, const char* cat)
      : monitor_(monitor), name_(name), cat_(cat), begin_(monitor ? own_clock_ns() : 0) {}
  ~MonitorSpan() {
    if (monitor_) monitor_->add_span(name_, cat_, begin_, own_clock_ns(), bytes);
  }
  MonitorSpan(const MonitorSpan&) = delete;
  MonitorSpan& operator=(const MonitorSpan&) = delete;
  int64_t bytes = -1;  ///< set before the end: the span's bytes
  void cancel() { monitor_ = nullptr; }  ///< records nothing after all

 private:
  StepMonitor* monitor_;
  const char* name_;
  const char* cat_;
  int64_t begin_;
};

/// cohort's way to the implementation behind a cohort::Monitor.
struct MonitorInternals {
  static StepMonitor& of(Monitor& m) { return *m.impl_; }
};

/// The thread's monitor (cohort::monitor()'s implementation).
StepMonitor& current_step_monitor();

/// The "metrics" message for `r` (docs/monitoring.md): one JSON object, non-finite numbers as the
/// strings "nan", "inf", "-inf".
std::string metrics_message(const StepRecord& r, const WorkerIdentity& who);
/// Appends `v` as JSON: the shortest text that reads back to the same double, or a string for
/// a non-finite value.
void append_json_number(std::string& out, double v);

}  // namespace cohort::detail
