// hub/state.h — private to the hub: Hub::State, what the hub knows about the job and each
// rank, and which of the hub's files does what with it:
//   hub.cpp           the inputs: worker messages, launcher events, rounds, ticks; applying them
//   hub/detect.cpp    the detectors run on that state (job steps, loss spike, straggler, NaN, stall)
//   hub/outputs/snapshot.cpp  snapshot() and the JSON pieces the "state" stream message shares with it
//   hub/outputs/prometheus.cpp  prometheus_text()
//   hub/replay.cpp    feeding a written log back in (`cohort dashboard RUN_DIR`)
//   hub/outputs/stream.*  the subscribers' queues
// One mutex (State::mu) guards all of it; every State method expects it held. Nothing public here:
// hub.h is the hub's interface, and this header is included by the hub's own .cpp files only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <istream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "hub/outputs/event_log_writer.h"
#include "hub/hub.h"
#include "hub/outputs/stream.h"
#include "hub/values.h"

namespace cohort::hub {
namespace detail {

/// One step of a rank in the straggler window.
struct WindowPoint {
  double busy = kNaN;
  std::map<std::string, double> phases;
};

struct RankState {
  int rank = 0;
  int node = -1;
  std::string state = "starting";
  std::string reason;
  bool straggler = false;
  std::string slow_phase;
  nlohmann::json last;        // the latest metrics record (null before the first)
  int64_t step = -1;          // the latest step reported
  int64_t steps_total = 0;    // metrics records this run
  double comm_bytes_total = 0;
  std::deque<WindowPoint> window;            // this round's recent steps (the straggler rule)
  std::deque<nlohmann::json> history;        // recent {step, step_s, phases} (the step-time view), kept over rounds
  std::deque<nlohmann::json> timelines;      // recent {step, timeline} (the timeline panel), kept over rounds
  double progress_at = 0;                    // wall time (hub clock) the step last advanced
  int64_t nan_event_step = std::numeric_limits<int64_t>::min();  // the step of its last nan anomaly
  struct PendingNan {
    int64_t step;
    std::string what;
    double value_seen_at;
    double value;
  };
  std::optional<PendingNan> pending_nan;
};

/// A job step not yet reported by every rank.
struct PendingStep {
  int reports = 0;
  double loss_sum = 0;
  int losses = 0;
  bool loss_nonfinite = false;
  double sps_sum = 0;
  int sps = 0;
  double t = 0;
  bool rank0_loss = false;
  double rank0_loss_value = kNaN;
};

}  // namespace detail

struct Hub::State {
  using json = nlohmann::json;
  using RankState = detail::RankState;
  using PendingStep = detail::PendingStep;

  explicit State(HubOptions o)
      : options(std::move(o)), log(options.run_dir.empty() ? "" : options.run_dir + "/events.jsonl") {}

  mutable std::mutex mu;
  HubOptions options;
  EventLogWriter log;
  bool replaying = false;

  // the job
  std::string job_name;
  std::string job_state = "starting";
  int world_size = 0;
  int round = -1;  // -1: no round_started yet (metrics are accepted from any round)
  int restarts = 0;
  json started_at = nullptr;
  std::string run_dir;  // as the start event says
  int64_t job_step = -1;
  std::map<int, RankState> ranks;

  // job-level history and detectors
  std::deque<json> history;                    // {step, t, loss, samples_per_s}
  std::map<int64_t, PendingStep> pending;      // job steps not yet reported by every rank
  int64_t last_finalized = std::numeric_limits<int64_t>::min();
  std::deque<double> spike_losses;
  bool in_spike = false;
  bool stalled = false;
  bool progressed_this_round = false;
  double progress_at = 0;

  // Recoveries (hub/recovery.cpp): the newest step the job reached, and, from a failure to the
  // first step after the restart, what the "recovered" event will say.
  int64_t newest_step = -1;
  struct Recovery {
    std::string cause;        // the failure event's reason
    double failed_at = 0;     // its time
    bool restarted = false;   // a round began since
    // One worker replaced in a running round (--keep-survivors): a survivor may still report steps
    // it took before it noticed, so only steps after the restore count as the recovery's first.
    bool in_place = false;
    json restored = nullptr;  // the checkpoint_restored event of that round, if any
  };
  std::optional<Recovery> recovering;
  int64_t steps_lost_total = 0;      // over the "recovered" events (live and replayed)
  double last_recovery_seconds = 0;  // the last one's

  std::deque<json> events;
  std::map<std::string, int64_t> events_total;
  std::map<std::string, int64_t> anomalies_total;

  detail::Subscribers subscribers;
  bool closed = false;

  // ---- hub.cpp: output helpers, events, rounds, metrics ----
  void publish(const char* event, const std::string& data) { subscribers.publish(event, data); }
  /// A line for the log and the stream; `line` is already in the log's form (nothing when replaying).
  void emit(const char* stream_event, const json& line);
  /// The "state" message: the job and the rank grid changed.
  void publish_state();
  RankState& rank(int r);
  json event_line(const std::string& kind, const std::string& message, json fields, double t);
  /// A new event: applied, logged, streamed.
  void record_event(json line);
  void anomaly(const std::string& what, const std::string& message, json fields);
  /// What an event line does to the state (live and in replay).
  void apply_event(const json& line);
  void start_round(int new_round, int ws, int restart_count);
  void apply_metrics(const json& record, double now);
  /// Keeps the record's "timeline" (spans of the step, issue 49) among the rank's last ones.
  void keep_timeline(RankState& s, int64_t step, const json& record) const;

  // ---- hub/detect.cpp ----
  /// Draws the pending job steps up to `last` (history, loss spike, straggler).
  void finalize_through(int64_t last);
  void finalize(int64_t step, const PendingStep& ps);
  void check_stragglers(int64_t step);
  /// NaN/Inf the worker did not report itself within the grace time (`all`: regardless of it).
  void flush_pending_nans(double now, bool all);
  /// One stall event when no step advanced for --stall-timeout.
  void check_stall(double now);

  // ---- hub/outputs/snapshot.cpp ----
  json job_json() const;
  json rank_json(const RankState& s) const;
  json ranks_json() const;

  // ---- hub/recovery.cpp ----
  /// Follows a failure, the next round and its restore (any event line).
  void recovery_event(const json& line);
  /// A step of the new round ends the recovery: one "recovered" event (none when replaying: the
  /// log has it) with the cause, where the state came from, the steps lost and the time it took.
  void recovery_progress(int64_t step, double t);

  // ---- hub/replay.cpp ----
  /// Lines of a log, applied as they were when they were written; returns the lines read.
  size_t replay(std::istream& in);
};

}  // namespace cohort::hub
