// cohort/monitor.h — telling cohort how far training got, and what it looked like.
//
//   for (auto& batch : *loader) {
//     optimizer.zero_grad();
//     auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
//     loss.backward();
//     optimizer.step();
//     cohort::monitor().step({{"loss", loss.item<double>()}, {"lr", lr}});
//   }
//
// monitor().step(scalars) records one finished training step: it counts the step (feeding the
// agent's hang detector exactly as report_step() does) and, with monitoring on (the default;
// COHORT_MONITOR=0 turns it off), measures without user code
//   * the step time split into phases: data (previous step() → forward), forward, backward
//     (forward end → end of backward compute, the loss included), comm_wait (waiting for the
//     gradient buckets after backward) and optimizer (→ step()); their sum is the step time.
//     DistributedDataParallel and ShardedDataParallel place the marks; without them only the
//     step time is known;
//   * samples (the batch dimension of the DDP forward's first tensor argument, summed over the
//     step's forwards) and samples/s; the global L2 norm of the averaged gradients (DDP);
//     resident memory; bytes communicated, the time with a gradient collective in flight, and the
//     allreduce bus bandwidth (busbw, docs/ARCHITECTURE.md);
// and sends it all to `cohort run`'s agent as one "metrics" datagram (docs/monitoring.md), which
// never blocks: a slow or absent agent loses the message, not training time. Without an agent
// (torchrun, a plain run) the latest record is kept in memory: monitor().last().
//
// Non-finite values: a NaN or Inf gradient norm (or "loss" scalar) is an anomaly, sent as an
// event and handled by MonitorOptions::on_nan (COHORT_ON_NAN, `cohort run --on-nan`):
//   stop  throws cohort::AnomalyError from loss.backward() (or step(), for the loss) on every rank;
//   skip  drops every gradient of the step (the optimizer then skips it, on every rank alike);
//   warn  only reports.
//
// One Monitor per process (one rank per process). Tests that run ranks as threads bind each
// thread to its own Monitor with ScopedMonitor before they build their DDP model; without that the
// threads share the process's monitor, which is harmless but mixes their numbers.
//
// report_step(step) is the older, minimal form: it only records the step number (two relaxed
// atomic stores), for programs that want no measurement at all.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cohort {

/// Records that training reached `step` (the hang detector's progress counter). Cheap: two
/// relaxed atomic stores; never blocks. monitor().step() calls it too.
void report_step(int64_t step);

/// What to do when the gradient norm or the "loss" scalar is NaN or infinite.
enum class OnNan { stop, skip, warn };
/// "stop", "skip" or "warn".
const char* to_string(OnNan policy);
/// "stop", "skip" or "warn"; nullopt for anything else.
std::optional<OnNan> parse_on_nan(const std::string& text);

/// What a Monitor measures, and what it does with non-finite values.
struct MonitorOptions {
  /// Measure and send (COHORT_MONITOR=0 in the environment: off; step() then only counts).
  bool enabled = true;
  /// Default: COHORT_ON_NAN ("stop", "skip", "warn"), else stop.
  OnNan on_nan = OnNan::stop;
  /// Compute the gradient norm after DDP's allreduce (needed for the NaN policy on gradients).
  bool grad_norm = true;

  /// The defaults above, read from the environment.
  static MonitorOptions from_env();
};

/// The phases of a step, in order.
enum class Phase : uint8_t { data = 0, forward, backward, comm_wait, optimizer };
/// The number of phases.
constexpr int kPhaseCount = 5;
/// The phase's name: "data", "forward", "backward", "comm_wait" or "optimizer".
const char* to_string(Phase phase);

/// The most spans one step's timeline carries (StepTimeline::truncated says when more were left out).
constexpr int kMaxTimelineSpans = 256;

/// One span of a step's timeline (docs/monitoring.md, "The timeline panel"). The strings are static literals.
struct TimelineSpan {
  const char* name = "";  ///< "data", "forward", "backward", "comm_wait", "optimizer", "bucket", "ckpt_write", ...
  const char* cat = "";   ///< "compute", "comm" or "io"
  double start_s = 0;     ///< seconds after the timeline's t0 (negative: begun before this step)
  double dur_s = 0;       ///< its length in seconds (>= 0)
  int32_t index = -1;     ///< a collective's bucket or chunk number; -1: none
  int64_t bytes = -1;     ///< bytes communicated or written; -1: none
  const char* algorithm = "";  ///< a collective's algorithm: "ring" (Gloo), "shm" (shared memory), "nccl"
  const char* what = "";  ///< what a collective was for ("ddp bucket", ...); empty: nothing to say
};

/// A step's spans on the job clock (StepRecord::timeline; docs/monitoring.md, "The timeline panel").
struct StepTimeline {
  double t0 = 0;              ///< job-clock seconds when the step began (the previous step() call)
  double clock_offset_s = 0;  ///< this rank's clock offset: its own clock + offset = the job clock
  double clock_error_s = 0;   ///< the offset's measured uncertainty (half the best round trip)
  std::vector<TimelineSpan> spans;  ///< at most kMaxTimelineSpans, phases first, then as recorded
  bool truncated = false;     ///< spans were left out over the cap
};

/// One step as measured (what the "metrics" message carries).
struct StepRecord {
  int64_t step = 0;    ///< the step's number
  double t = 0;        ///< wall clock (seconds since the Unix epoch) at the end of the step
  double step_s = 0;   ///< since the previous step() (the first: since the first DDP forward)
  std::array<double, kPhaseCount> phase_s{};  ///< seconds in each phase, by Phase (see phase_mask, phase())
  uint8_t phase_mask = 0;  ///< bit p: phase p measured; 0: no phase marks (no DDP)
  std::optional<int64_t> samples;  ///< the training forwards' batch sizes, summed (unset: none counted)
  std::optional<double> samples_per_s;  ///< samples / step_s
  std::optional<double> grad_norm;  ///< global L2 norm of the averaged gradients (unset: not computed)
  bool skipped = false;  ///< on_nan=skip dropped this step's gradients
  int64_t rss_bytes = 0;  ///< resident memory of the process (read at most every 0.5 s)
  std::optional<int64_t> cuda_bytes;  ///< CUDA memory allocated on the model's device (unset on the CPU)
  int64_t comm_bytes = 0;  ///< bytes of the collectives that completed since the previous step
  double comm_s = 0;  ///< seconds with a gradient collective in flight
  std::optional<double> busbw;  ///< allreduce bus bandwidth in bytes/s (unset where comm_s is 0)
  /// With a DDP communication hook (comm_hook.h): the gradient bytes it was given over the
  /// gradient bytes it sent (fp16: about 2; PowerSGD: 10 to 100s).
  std::optional<double> compression;
  /// Time cohort's monitoring itself took since the previous record: the gradient norm of this
  /// step and the previous step() call (formatting and sending its message). The overhead
  /// benchmark divides it by step_s.
  double monitor_s = 0;
  /// CPU seconds the process (all its threads) used since the previous record. Against the
  /// machine's busy time it shows how much of the machine other work took (`cohort sim calibrate`
  /// drops steps slowed by such load, docs/sim.md).
  double cpu_s = 0;
  std::vector<std::pair<std::string, double>> scalars;  ///< the scalars given to step(), in order
  /// The step's spans (phases, collectives, checkpoint I/O) on the job clock; empty spans with
  /// COHORT_TIMELINE=0.
  StepTimeline timeline;

  /// Seconds in phase `p`; nullopt where it was not measured.
  std::optional<double> phase(Phase p) const {
    const int i = static_cast<int>(p);
    if (!(phase_mask & (1u << i))) return std::nullopt;
    return phase_s[i];
  }
  /// The scalar called `name`; nullopt where the step has none.
  std::optional<double> scalar(const std::string& name) const {
    for (const auto& [n, v] : scalars)
      if (n == name) return v;
    return std::nullopt;
  }
};

namespace detail {
class StepMonitor;        // the implementation (src/monitor/worker_monitor.h)
struct MonitorInternals;  // cohort's own hooks into it (DDP, the Checkpointer)
}  // namespace detail

/// Measures finished training steps and sends them to `cohort run`'s agent (docs/monitoring.md);
/// one per process, reached through monitor().
class Monitor {
 public:
  /// A step's named values, e.g. `{{"loss", 0.53}, {"lr", 0.01}}`.
  using Scalars = std::initializer_list<std::pair<std::string, double>>;

  /// Options from the environment (MonitorOptions::from_env()).
  Monitor();
  /// With `options` as they are (the environment is not read).
  explicit Monitor(const MonitorOptions& options);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Replaces the options (e.g. on_nan from a command-line flag).
  void configure(const MonitorOptions& options);
  /// The options in effect.
  MonitorOptions options() const;

  /// Records one finished step, numbered one more than the last (or than set_step()).
  void step(Scalars scalars = {});
  /// As step(Scalars), from a map (the scalars then in name order).
  void step(const std::map<std::string, double>& scalars);
  /// Records one finished step with its number given.
  void step(int64_t step, Scalars scalars = {});
  /// As step(int64_t, Scalars), from a map.
  void step(int64_t step, const std::map<std::string, double>& scalars);

  /// The number of the last recorded step (0 before the first).
  int64_t current_step() const;
  /// Continues numbering after `step` (the Checkpointer's restore calls it).
  void set_step(int64_t step);
  /// The latest record; nullopt before the first step or with monitoring off.
  std::optional<StepRecord> last() const;
  /// Steps whose gradients on_nan=skip dropped, so far.
  int64_t skipped_steps() const;
  /// Metrics messages handed to the agent link, so far.
  int64_t messages_sent() const;

 private:
  friend struct detail::MonitorInternals;
  std::unique_ptr<detail::StepMonitor> impl_;
};

/// This process's monitor (or, on a thread inside a ScopedMonitor, that one).
Monitor& monitor();

/// Binds monitor() on this thread to `m` while it lives: for tests that run ranks as threads.
/// Build DDP / the Checkpointer inside the scope: they keep the monitor they found (which must
/// outlive them).
class ScopedMonitor {
 public:
  /// Binds monitor() on this thread to `m`; the destructor restores the previous binding.
  explicit ScopedMonitor(Monitor& m);
  ~ScopedMonitor();
  ScopedMonitor(const ScopedMonitor&) = delete;
  ScopedMonitor& operator=(const ScopedMonitor&) = delete;

 private:
  Monitor* previous_;
};

}  // namespace cohort
