// hub/hub.h — the agent's view of a running job: every worker's metrics and events, the
// launcher's events, the detectors, and what the outside sees (the JSONL log, /metrics, the page).
//
// The leading agent owns one Hub. Its main loop feeds it (worker messages from the worker link or
// forwarded by other nodes' agents, launcher events, a tick for stall detection); the dashboard's
// HTTP threads read it (a snapshot, the Prometheus text, a subscription for server-sent events).
// Every method is thread-safe; inputs never block on readers (a subscriber that falls behind loses
// its oldest messages, and is told so by a "resync" message that makes the page reload the snapshot).
// No torch here: the launcher links it and starts in milliseconds.
// Formats: /tmp/notes/issue6-spec.md until docs/monitoring.md holds them.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace cohort::hub {

struct HubOptions {
  std::string run_dir;     // events.jsonl is appended there; empty: no log (tests, `cohort dashboard`)
  std::string job_name;    // the `job` label of every Prometheus series
  double straggler_factor = 1.5;
  int straggler_window = 20;
  double spike_factor = 3.0;
  int spike_window = 50;
  double stall_timeout_s = 60;
  size_t history_points = 2000;  // job-level chart points kept (per-step loss, throughput)
  size_t rank_history = 200;     // per-rank step records kept (the step-time view)
  size_t events_kept = 500;      // events kept for the page's timeline
  size_t timeline_steps = 20;    // per-rank step timelines kept (the timeline panel, issue 49)
};

/// One server-sent-event message: name ("metrics", "event", "state", "resync") and JSON text.
struct StreamMessage {
  std::string event;
  std::string data;
};

/// What a dashboard connection reads: messages since it subscribed, in order.
class Subscription {
 public:
  virtual ~Subscription() = default;
  /// The next message, waiting up to `timeout`; false on timeout or when the hub is closing.
  virtual bool next(StreamMessage& out, std::chrono::milliseconds timeout) = 0;
};

class Hub {
 public:
  explicit Hub(HubOptions options);
  ~Hub();
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  // ---- inputs (the agent's loop) ----
  /// A worker's "metrics" or "event" message (other types are ignored). `node`: the node rank of
  /// the agent it came through. Malformed messages are dropped.
  void worker_message(const nlohmann::json& message, int node);
  /// A launcher event: kind as in the spec (start, rendezvous, round_started, failure, restart,
  /// finished), a one-line message, and the kind's fields. Logged, counted, streamed, and applied
  /// to the job/rank states (failure → that rank failed; restart → restarting; finished → final).
  void job_event(const std::string& kind, const std::string& message, nlohmann::json fields = nlohmann::json::object());
  /// A new round begins with this world size: ranks [0, world_size) become "starting".
  void round_started(int round, int world_size, int restart_count);
  /// Stall detection; call about once a second. `now`: wall-clock seconds.
  void tick(double now);
  /// A sample of the leading agent's machine over the last interval (launcher/watch/machine_load.h):
  /// logged as {"type": "machine", "t", "cores", "busy_cores", "steal_cores"}, neither streamed nor
  /// counted. `cohort sim calibrate` sets it against the workers' cpu_s to see other work's load.
  void machine_sample(double t, int cores, double busy_cores, double steal_cores);

  // ---- outputs (any thread) ----
  /// Everything the page needs to draw from scratch: job (name, state, world_size, round,
  /// restarts, step, samples_per_s, started_at, run_dir), ranks [{rank, node, state, reason, step,
  /// step_s, phases, samples_per_s, scalars, grad_norm, rss_bytes, cuda_bytes, busbw, t,
  /// straggler (bool), slow_phase}], history [{step, t, loss, samples_per_s}], rank_history
  /// {rank: [{step, step_s, phases}]}, timelines {rank: [{step, timeline}]} (the last
  /// timeline_steps step timelines a rank reported, its spans capped at 512), events [...],
  /// anomalies_total {kind: n}, events_total {kind: n}. Non-finite values stay the strings the workers sent ("nan", "inf"); null: unknown.
  nlohmann::json snapshot() const;
  /// The Prometheus text exposition (format 0.0.4).
  std::string prometheus_text() const;
  /// Live messages from now on: "metrics" (one per worker step: the metrics record), "event"
  /// (an event line), "state" (job state and the rank grid changed: {job, ranks}), "resync".
  std::shared_ptr<Subscription> subscribe();
  /// Wakes every subscriber and makes their next() return false (server shutdown).
  void close();

  // ---- replay (`cohort dashboard RUN_DIR`) ----
  /// Feeds every line of an events.jsonl written by a hub (metrics and events) into this hub,
  /// without re-logging them; returns the number of lines read. Throws cohort::ConfigError
  /// naming the file when it cannot be read.
  size_t replay_file(const std::string& events_jsonl);
  /// The same for lines already in memory (e.g. what a followed log grew by since the last read):
  /// complete lines, newline-separated. Replayed lines are also streamed to the subscribers
  /// (as "metrics"/"event"/"state"), so a page follows a log that is still being written.
  size_t replay_text(const std::string& lines);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cohort::hub
