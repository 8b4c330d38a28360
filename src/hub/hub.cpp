// The hub's inputs: worker messages, launcher events, new rounds and ticks, and what each does to
// the job's and the ranks' state (hub/state.h). See hub.h; the formats are in docs/monitoring.md.
// Not here: the detectors (hub/detect.cpp), the outputs (hub/outputs/snapshot.cpp, hub/outputs/prometheus.cpp),
// replay of a log (hub/replay.cpp), the subscribers' queues (hub/outputs/stream.cpp).
//
// One mutex guards everything; inputs do a little bookkeeping, one JSON dump shared by the log and
// the live streams, and (once per job step, when every rank reported it) the detectors. Readers
// (snapshot, /metrics) build their answer under the same mutex; subscribers have queues of their
// own, so a slow dashboard connection never holds the agent.
#include "hub/hub.h"

#include <algorithm>
#include <cmath>

#include "hub/state.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

namespace {
constexpr size_t kPendingSteps = 8;  // job steps waiting for their last rank's report
const char* const kBlamedPhases[] = {"data", "forward", "backward", "optimizer"};

// Whether an event of this kind may come from a worker. The kinds that change the job's shape or
// state (a round and its world size, a failure, the end) are the launcher's, and the detectors'
// anomalies the hub's own: a worker's datagram — which anyone on the machine can forge — claiming
// one is dropped, never logged (so that a replay cannot take it for the launcher's either).
bool worker_may_send(const json& event) {
  static const char* const kNotWorkers[] = {"start",   "rendezvous", "round_started", "failure",
                                            "restart", "replaced",   "finished",      "recovered"};
  const std::string& kind = event["kind"].get_ref<const std::string&>();
  for (const char* k : kNotWorkers) {
    if (kind == k) return false;
  }
  return kind != "anomaly" || text_at(event, "anomaly") == "nan";  // straggler, stall, loss_spike: the hub's
}
}  // namespace

// ---- Hub::State: output helpers ----

void Hub::State::emit(const char* stream_event, const json& line) {
  if (replaying) return;
  const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
  log.write(text);
  publish(stream_event, text);
}

void Hub::State::publish_state() {
  if (subscribers.empty()) return;
  publish("state", json{{"job", job_json()}, {"ranks", ranks_json()}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

Hub::State::RankState& Hub::State::rank(int r) {
  auto [it, inserted] = ranks.try_emplace(r);
  if (inserted) it->second.rank = r;
  return it->second;
}

// ---- Hub::State: events ----

json Hub::State::event_line(const std::string& kind, const std::string& message, json fields, double t) {
  json line = fields.is_object() ? std::move(fields) : json::object();
  line["t"] = t;
  line["type"] = "event";
  line["kind"] = kind;
  line["message"] = message;
  return line;
}

void Hub::State::record_event(json line) {
  emit("event", line);  // first: the "state" message the event may cause follows it
  apply_event(line);
}

void Hub::State::anomaly(const std::string& what, const std::string& message, json fields) {
  fields["anomaly"] = what;
  record_event(event_line("anomaly", message, std::move(fields), wall_now()));
}

void Hub::State::apply_event(const json& line) {
  const std::string kind = text_at(line, "kind");
  ++events_total[kind];
  events.push_back(line);
  trim(events, options.events_kept);
  recovery_event(line);
  bool state_changed = false;
  const auto rank_of = [&]() -> std::optional<int> {
    auto r = integer_at(line, "rank");
    if (r && *r >= 0 && *r < (1 << 24)) return static_cast<int>(*r);
    return std::nullopt;
  };
  if (kind == "start") {
    if (auto t = number_at(line, "t")) started_at = *t;
    if (job_name.empty() && line.contains("job") && line["job"].is_string()) job_name = line["job"];
    if (line.contains("run_dir") && line["run_dir"].is_string()) run_dir = line["run_dir"];
    // The settings the run was judged with (logged by cohort run), so that a replay draws the
    // same straggler and spike states as the live page did.
    if (line.contains("detectors") && line["detectors"].is_object()) {
      const auto& d = line["detectors"];
      if (auto v = number_at(d, "straggler_factor"); v && *v > 1) options.straggler_factor = *v;
      if (auto v = integer_at(d, "straggler_window"); v && *v >= 2 && *v <= 10000) options.straggler_window = static_cast<int>(*v);
      if (auto v = number_at(d, "spike_factor"); v && *v > 1) options.spike_factor = *v;
      if (auto v = integer_at(d, "spike_window"); v && *v >= 2 && *v <= 100000) options.spike_window = static_cast<int>(*v);
      if (auto v = number_at(d, "stall_timeout_s"); v && *v > 0) options.stall_timeout_s = *v;
    }
  } else if (kind == "rendezvous") {
    if (auto w = integer_at(line, "world_size")) world_size = static_cast<int>(*w);
  } else if (kind == "round_started") {
    start_round(static_cast<int>(integer_at(line, "round").value_or(0)),
                static_cast<int>(integer_at(line, "world_size").value_or(world_size)),
                static_cast<int>(integer_at(line, "restart").value_or(restarts)));
    state_changed = true;
  } else if (kind == "failure") {
    if (auto r = rank_of()) {
      RankState& s = rank(*r);
      s.state = "failed";
      s.reason = text_at(line, "reason", text_at(line, "message"));
      s.straggler = false;
      if (auto n = integer_at(line, "node")) s.node = static_cast<int>(*n);
      state_changed = true;
    }
  } else if (kind == "restart") {
    job_state = "restarting";
    if (auto k = integer_at(line, "restarts")) restarts = std::max(restarts, static_cast<int>(*k));
    for (auto& [r, s] : ranks) {
      if (s.state != "failed") s.state = "restarting";
    }
    state_changed = true;
  } else if (kind == "finished") {
    job_state = text_at(line, "state", "failed");
    for (auto& [r, s] : ranks) {
      if (s.state != "failed") s.state = "finished";
      s.straggler = false;
    }
    state_changed = true;
  } else if (kind == "anomaly") {
    const std::string what = text_at(line, "anomaly");
    ++anomalies_total[what];
    if (what == "straggler") {
      if (auto r = rank_of()) {
        RankState& s = rank(*r);
        s.straggler = true;
        s.slow_phase = text_at(line, "phase", "step");
        if (s.state == "running" || s.state == "starting") s.state = "slow";
        state_changed = true;
      }
    } else if (what == "stall") {
      stalled = true;
      for (auto& [r, s] : ranks) {
        if (s.state == "running" || s.state == "slow" || s.state == "starting") s.state = "stalled";
      }
      state_changed = true;
    } else if (what == "nan") {
      if (auto r = rank_of()) {
        RankState& s = rank(*r);
        s.nan_event_step = integer_at(line, "step").value_or(s.step);
        s.pending_nan.reset();
      }
    } else if (what == "loss_spike") {
      in_spike = true;
    }
  }
  if (state_changed) publish_state();
}

void Hub::State::start_round(int new_round, int ws, int restart_count) {
  if (ws < 0 || ws > (1 << 20)) ws = world_size;  // a damaged log line
  round = new_round;
  world_size = ws;
  restarts = std::max(restarts, restart_count);
  job_state = "running";
  for (auto it = ranks.begin(); it != ranks.end();) {
    if (it->first >= ws) {
      it = ranks.erase(it);
      continue;
    }
    RankState& s = it->second;
    s.state = "starting";
    s.reason.clear();
    s.straggler = false;
    s.slow_phase.clear();
    s.window.clear();
    s.pending_nan.reset();
    s.step = -1;
    ++it;
  }
  for (int r = 0; r < ws; ++r) rank(r);
  pending.clear();
  last_finalized = std::numeric_limits<int64_t>::min();
  stalled = false;
  progressed_this_round = false;
  job_step = -1;
}

// ---- Hub::State: metrics ----

void Hub::State::apply_metrics(const json& record, double now) {
  const int r = static_cast<int>(*integer_at(record, "rank"));
  const int64_t step = *integer_at(record, "step");
  recovery_progress(step, number_at(record, "t").value_or(now));
  newest_step = std::max(newest_step, step);
  RankState& s = rank(r);
  bool state_changed = false;
  if (auto n = integer_at(record, "node")) s.node = static_cast<int>(*n);
  s.last = record;
  ++s.steps_total;
  if (auto b = number_at(record, "comm_bytes"); b && std::isfinite(*b)) s.comm_bytes_total += *b;
  if (s.state == "starting" || s.state == "stalled" || s.state == "restarting") {
    s.state = s.straggler ? "slow" : "running";
    state_changed = true;
  }
  if (job_state == "starting") {
    job_state = "running";
    state_changed = true;
  }
  if (step > s.step || s.step < 0) {
    s.progress_at = now;
    progress_at = now;
    progressed_this_round = true;
    if (stalled) {
      stalled = false;
      for (auto& [other, os] : ranks) {
        if (os.state == "stalled") os.state = os.straggler ? "slow" : "running";
      }
      state_changed = true;
    }
  }
  s.step = step;
  job_step = std::max(job_step, step);

  const json phases = record.contains("phases") && record["phases"].is_object() ? record["phases"] : json::object();
  const double step_s = number_or_nan(record, "step_s");
  s.history.push_back({{"step", step}, {"step_s", value_json(step_s)}, {"phases", phases}});
  trim(s.history, options.rank_history);
  keep_timeline(s, step, record);

  WindowPoint p;
  const double comm_wait = number_at(phases, "comm_wait").value_or(0);
  p.busy = std::isfinite(step_s) ? step_s - (std::isfinite(comm_wait) ? comm_wait : 0) : kNaN;
  for (const char* name : kBlamedPhases) {
    if (auto v = number_at(phases, name); v && std::isfinite(*v)) p.phases[name] = *v;
  }
  if (std::isfinite(p.busy)) {
    s.window.push_back(std::move(p));
    trim(s.window, static_cast<size_t>(std::max(1, options.straggler_window)));
  }

  // NaN / Inf that the worker did not report itself (it may still: wait kNanGraceS for its event).
  if (!replaying && s.nan_event_step != step && !s.pending_nan) {
    const json scalars = record.contains("scalars") ? record["scalars"] : json::object();
    const auto loss = number_at(scalars, "loss");
    const auto grad = number_at(record, "grad_norm");
    if (loss && !std::isfinite(*loss)) s.pending_nan = RankState::PendingNan{step, "loss", now, *loss};
    else if (grad && !std::isfinite(*grad)) s.pending_nan = RankState::PendingNan{step, "grad_norm", now, *grad};
  }

  // The job's step: once every rank reported it.
  PendingStep& ps = pending[step];
  ++ps.reports;
  ps.t = std::max(ps.t, number_or_nan(record, "t"));
  if (auto loss = number_at(record.contains("scalars") ? record["scalars"] : json(), "loss")) {
    if (std::isfinite(*loss)) {
      ps.loss_sum += *loss;
      ++ps.losses;
    } else {
      ps.loss_nonfinite = true;
    }
    if (r == 0) {
      ps.rank0_loss = true;
      ps.rank0_loss_value = *loss;
    }
  }
  if (auto sps = number_at(record, "samples_per_s"); sps && std::isfinite(*sps)) {
    ps.sps_sum += *sps;
    ++ps.sps;
  }
  const int expected = world_size > 0 ? world_size : static_cast<int>(ranks.size());
  if (step <= last_finalized) {
    pending.erase(step);  // a late report of a step already drawn
  } else if (ps.reports >= expected) {
    finalize_through(step);
  } else if (pending.size() > kPendingSteps) {
    finalize_through(pending.begin()->first);  // a rank stopped reporting: draw with what came
  }
  if (state_changed) publish_state();
}

void Hub::State::keep_timeline(RankState& s, int64_t step, const json& record) const {
  constexpr size_t kMaxSpans = 512;  // a step's spans kept for the page (the worker caps its own too)
  auto it = record.find("timeline");
  if (it == record.end() || !it->is_object() || options.timeline_steps == 0) return;
  auto spans = it->find("spans");
  if (spans == it->end() || !spans->is_array()) return;
  // A step at or below the newest kept (a restart resumed from a checkpoint) replaces the tail.
  while (!s.timelines.empty() && integer_at(s.timelines.back(), "step").value_or(-1) >= step) s.timelines.pop_back();
  json timeline = *it;
  if (spans->size() > kMaxSpans) {
    timeline["spans"].get_ref<json::array_t&>().resize(kMaxSpans);
    timeline["truncated"] = true;
  }
  s.timelines.push_back({{"step", step}, {"timeline", std::move(timeline)}});
  trim(s.timelines, options.timeline_steps);
}

// ---- Hub ----

Hub::Hub(HubOptions options) : state_(std::make_unique<State>(std::move(options))) {
  state_->job_name = state_->options.job_name;
}

Hub::~Hub() { close(); }

void Hub::worker_message(const nlohmann::json& message, int node) {
  if (!message.is_object()) return;
  auto type_it = message.find("type");
  if (type_it == message.end() || !type_it->is_string()) return;
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type != "metrics" && type != "event") return;
  const auto rank = integer_at(message, "rank");
  if (!rank || *rank < 0 || *rank >= (1 << 24)) return;

  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;
  // The world's size is the launcher's (round_started): a rank outside it is no worker of this
  // job, and must not make the hub keep ranks that never report (a stall, a hang that is none).
  if (s.world_size > 0 && *rank >= s.world_size) return;
  const double now = wall_now();
  json line = message;
  line.erase("pid");
  line["node"] = node;
  if (!number_at(line, "t")) line["t"] = now;
  if (type == "metrics") {
    if (!integer_at(message, "step")) return;
    // A report of an earlier round's worker (still queued when this round began).
    if (auto restart = integer_at(message, "restart"); restart && s.round >= 0 && *restart < s.round) return;
    s.emit("metrics", line);  // before what it may trigger: the log reads in cause-and-effect order
    s.apply_metrics(line, now);
  } else {
    if (!line.contains("kind") || !line["kind"].is_string()) return;
    if (!line.contains("message") || !line["message"].is_string()) line["message"] = line["kind"];
    // Fields a worker nested under "fields" that the event's kind is known by (anomaly, policy, ...).
    if (line.contains("fields") && line["fields"].is_object()) {
      for (const char* key : {"anomaly", "policy", "what", "step"}) {
        if (!line.contains(key) && line["fields"].contains(key)) line[key] = line["fields"][key];
      }
    }
    if (!worker_may_send(line)) return;
    s.record_event(std::move(line));
  }
}

void Hub::job_event(const std::string& kind, const std::string& message, nlohmann::json fields) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;
  if (kind == "finished" || kind == "restart" || kind == "failure") s.flush_pending_nans(wall_now(), true);
  if (kind == "start" && !fields.contains("job")) fields["job"] = s.job_name;
  json line = s.event_line(kind, message, std::move(fields), wall_now());
  // Valid UTF-8 from here on (a program's arguments need not be): readers dump() it freely.
  line = json::parse(line.dump(-1, ' ', false, json::error_handler_t::replace), nullptr, false);
  s.record_event(std::move(line));
}

void Hub::round_started(int round, int world_size, int restart_count) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;
  s.flush_pending_nans(wall_now(), true);
  const std::string message = "round " + std::to_string(round) + " started with " + std::to_string(world_size) +
                              " rank" + (world_size == 1 ? "" : "s") +
                              (restart_count > 0 ? " (restart " + std::to_string(restart_count) + ")" : "");
  s.record_event(s.event_line("round_started", message,
                              {{"round", round}, {"world_size", world_size}, {"restart", restart_count}}, wall_now()));
}

void Hub::tick(double now) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;
  s.flush_pending_nans(now, false);
  s.check_stall(now);
}

void Hub::machine_sample(double t, int cores, double busy_cores, double steal_cores) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed || s.replaying) return;
  s.log.write(json{{"type", "machine"}, {"t", t}, {"cores", cores}, {"busy_cores", busy_cores}, {"steal_cores", steal_cores}}
                  .dump());
}

std::shared_ptr<Subscription> Hub::subscribe() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) {
    auto q = std::make_shared<Queue>();
    q->close();
    return q;
  }
  return s.subscribers.add();
}

void Hub::close() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.closed = true;
  s.subscribers.close_all();
}

}  // namespace cohort::hub
