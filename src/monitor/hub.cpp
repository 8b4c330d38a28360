// The agent's view of a running job. See hub.h; the formats are in docs/monitoring.md.
//
// One mutex guards everything; inputs do a little bookkeeping, one JSON dump shared by the log and
// the live streams, and (once per job step, when every rank reported it) the detectors. Readers
// (snapshot, /metrics) build their answer under the same mutex; subscribers have queues of their
// own, so a slow dashboard connection never holds the agent.
//
// Replay (`cohort dashboard RUN_DIR`) feeds the logged lines through the same apply functions with
// `replaying_` set: nothing is logged or emitted, the detectors still update the rank states
// (a straggler that recovered has no event of its own), and the logged anomaly events do the rest —
// so a replayed hub shows what the live one showed.
#include "hub.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "cohort/error.h"
#include "detector_rules.h"
#include "event_log_writer.h"
#include "prometheus_text.h"

namespace cohort::hub {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kQueueLimit = 4096;      // messages a subscriber may fall behind before a resync
constexpr size_t kPendingSteps = 8;       // job steps waiting for their last rank's report
constexpr double kNanGraceS = 1.0;        // a worker's own nan event may follow its metrics this late
const char* const kRankStates[] = {"starting", "running", "slow", "stalled", "restarting", "failed", "finished"};
const char* const kJobStates[] = {"starting", "running", "restarting", "succeeded", "failed", "interrupted"};
const char* const kBlamedPhases[] = {"data", "forward", "backward", "optimizer"};

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// A number, or one of the strings non-finite numbers travel as ("nan", "inf", "-inf").
std::optional<double> number(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan" || s == "NaN" || s == "-nan") return kNaN;
    if (s == "inf" || s == "+inf" || s == "Inf" || s == "+Inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Inf") return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

std::optional<double> number_at(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  return number(*it);
}

/// A string member, or `fallback` when it is absent or not a string (inputs are never trusted).
std::string text_at(const json& object, const char* key, const std::string& fallback = "") {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double number_or_nan(const json& object, const char* key) { return number_at(object, key).value_or(kNaN); }

/// A double as JSON the way the messages carry it: a number, or "nan"/"inf"/"-inf".
json value_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::optional<int64_t> integer_at(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e18) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return it->get<int64_t>();
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

template <typename T>
void trim(std::deque<T>& d, size_t limit) {
  while (d.size() > limit) d.pop_front();
}

// ---- subscriptions ----
class Queue : public Subscription {
 public:
  void push(const StreamMessage& m) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      if (messages_.size() >= kQueueLimit) {
        // Fallen behind: what it has is stale anyway. It reloads the snapshot on "resync".
        messages_.clear();
        messages_.push_back({"resync", "{}"});
      }
      messages_.push_back(m);
    }
    cv_.notify_one();
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  bool next(StreamMessage& out, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return closed_ || !messages_.empty(); });
    // What was queued before close() is still delivered (the job's final state), then false.
    if (messages_.empty()) return false;
    out = std::move(messages_.front());
    messages_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamMessage> messages_;
  bool closed_ = false;
};

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
  json last;                  // the latest metrics record (null before the first)
  int64_t step = -1;          // the latest step reported
  int64_t steps_total = 0;    // metrics records this run
  double comm_bytes_total = 0;
  std::deque<WindowPoint> window;  // this round's recent steps (the straggler rule)
  std::deque<json> history;        // recent {step, step_s, phases} (the step-time view), kept over rounds
  double progress_at = 0;          // wall time (hub clock) the step last advanced
  int64_t nan_event_step = std::numeric_limits<int64_t>::min();  // the step of its last nan anomaly
  struct PendingNan {
    int64_t step;
    std::string what;
    double value_seen_at;
    double value;
  };
  std::optional<PendingNan> pending_nan;
};

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

}  // namespace

struct Hub::State {
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

  std::deque<json> events;
  std::map<std::string, int64_t> events_total;
  std::map<std::string, int64_t> anomalies_total;

  std::vector<std::weak_ptr<Queue>> subscribers;
  bool closed = false;

  // ---- output helpers ----
  void publish(const char* event, const std::string& data) {
    if (subscribers.empty()) return;
    StreamMessage m{event, data};
    for (size_t i = 0; i < subscribers.size();) {
      if (auto q = subscribers[i].lock()) {
        q->push(m);
        ++i;
      } else {
        subscribers.erase(subscribers.begin() + static_cast<long>(i));
      }
    }
  }

  // A line for the log and the stream; `line` is already in the log's form.
  void emit(const char* stream_event, const json& line) {
    if (replaying) return;
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace);
    log.write(text);
    publish(stream_event, text);
  }

  void publish_state() {
    if (subscribers.empty()) return;
    publish("state", json{{"job", job_json()}, {"ranks", ranks_json()}}.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  // ---- the pieces of the snapshot ----
  json job_json() const {
    double sps = 0;
    bool any = false;
    for (const auto& [r, s] : ranks) {
      if (s.state == "running" || s.state == "slow") {
        if (auto v = number_at(s.last, "samples_per_s"); v && std::isfinite(*v)) {
          sps += *v;
          any = true;
        }
      }
    }
    return {{"name", job_name},       {"state", job_state},  {"world_size", world_size},
            {"round", std::max(round, 0)}, {"restarts", restarts}, {"step", job_step},
            {"samples_per_s", any ? json(sps) : json(nullptr)}, {"started_at", started_at},
            {"run_dir", run_dir}};
  }

  json rank_json(const RankState& s) const {
    json r{{"rank", s.rank},
           {"node", s.node},
           {"state", s.state},
           {"reason", s.reason},
           {"step", s.step},
           {"straggler", s.straggler},
           {"slow_phase", s.straggler ? json(s.slow_phase) : json(nullptr)}};
    const json& m = s.last;
    auto copy = [&](const char* key) {
      if (m.is_object() && m.contains(key)) r[key] = m[key];
      else r[key] = nullptr;
    };
    copy("step_s");
    copy("samples_per_s");
    copy("grad_norm");
    copy("rss_bytes");
    copy("cuda_bytes");
    copy("busbw");
    copy("t");
    r["phases"] = m.is_object() && m.contains("phases") && m["phases"].is_object() ? m["phases"] : json::object();
    r["scalars"] = m.is_object() && m.contains("scalars") && m["scalars"].is_object() ? m["scalars"] : json::object();
    return r;
  }

  json ranks_json() const {
    json out = json::array();
    for (const auto& [r, s] : ranks) out.push_back(rank_json(s));
    return out;
  }

  RankState& rank(int r) {
    auto [it, inserted] = ranks.try_emplace(r);
    if (inserted) it->second.rank = r;
    return it->second;
  }

  // ---- events ----
  json event_line(const std::string& kind, const std::string& message, json fields, double t) {
    json line = fields.is_object() ? std::move(fields) : json::object();
    line["t"] = t;
    line["type"] = "event";
    line["kind"] = kind;
    line["message"] = message;
    return line;
  }

  /// A new event: applied, logged, streamed.
  void record_event(json line) {
    emit("event", line);  // first: the "state" message the event may cause follows it
    apply_event(line);
  }

  void anomaly(const std::string& what, const std::string& message, json fields) {
    fields["anomaly"] = what;
    record_event(event_line("anomaly", message, std::move(fields), wall_now()));
  }

  /// What an event line does to the state (live and in replay).
  void apply_event(const json& line) {
    const std::string kind = text_at(line, "kind");
    ++events_total[kind];
    events.push_back(line);
    trim(events, options.events_kept);
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

  void start_round(int new_round, int ws, int restart_count) {
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

  // ---- metrics ----
  void apply_metrics(const json& record, double now) {
    const int r = static_cast<int>(*integer_at(record, "rank"));
    const int64_t step = *integer_at(record, "step");
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

  void finalize_through(int64_t last) {
    while (!pending.empty() && pending.begin()->first <= last) {
      const int64_t step = pending.begin()->first;
      const PendingStep ps = pending.begin()->second;
      pending.erase(pending.begin());
      finalize(step, ps);
    }
  }

  void finalize(int64_t step, const PendingStep& ps) {
    last_finalized = step;
    double loss = kNaN;
    bool has_loss = false;
    if (ps.loss_nonfinite) {
      has_loss = true;  // NaN: the chart shows a gap, the nan rule reports it
    } else if (ps.losses > 0) {
      loss = ps.loss_sum / ps.losses;
      has_loss = true;
    } else if (ps.rank0_loss) {
      loss = ps.rank0_loss_value;
      has_loss = true;
    }
    const double sps = ps.sps > 0 ? ps.sps_sum : kNaN;
    history.push_back({{"step", step},
                       {"t", std::isfinite(ps.t) ? json(ps.t) : json(nullptr)},
                       {"loss", has_loss ? value_json(loss) : json(nullptr)},
                       {"samples_per_s", std::isfinite(sps) ? json(sps) : json(nullptr)}});
    trim(history, options.history_points);

    // Loss spike: one event per spike (until the loss is back under the threshold).
    if (has_loss && std::isfinite(loss)) {
      const std::vector<double> recent(spike_losses.begin(), spike_losses.end());
      const bool spike = is_loss_spike(loss, recent, options.spike_factor);
      if (spike && !in_spike) {
        const double m = median(recent);
        in_spike = true;
        if (!replaying) {
          anomaly("loss_spike",
                  "loss spike at step " + std::to_string(step) + ": " + fixed(loss, 4) + " is " + fixed(loss / m, 1) +
                      "x the median " + fixed(m, 4) + " of the last " + std::to_string(recent.size()) + " steps",
                  {{"step", step}, {"loss", loss}, {"median", m}});
        }
      } else if (!spike) {
        in_spike = false;
      }
      spike_losses.push_back(loss);
      trim(spike_losses, static_cast<size_t>(std::max(1, options.spike_window)));
    }
    check_stragglers(step);
  }

  void check_stragglers(int64_t step) {
    std::vector<RankWindow> windows;
    for (const auto& [r, s] : ranks) {
      if (s.state == "failed" || s.state == "finished" || s.window.empty()) continue;
      RankWindow w;
      w.rank = r;
      for (const WindowPoint& p : s.window) {
        w.busy.push_back(p.busy);
        for (const auto& [name, v] : p.phases) w.phases[name].push_back(v);
      }
      windows.push_back(std::move(w));
    }
    // A full window before judging: the first steps of a round (allocations, page faults, a
    // neighbour's burst on a shared machine) made 1.6x "stragglers" out of equal ranks.
    const size_t min_points = static_cast<size_t>(std::max(2, options.straggler_window));
    const std::vector<StragglerVerdict> verdicts = find_stragglers(windows, options.straggler_factor, 0.005, min_points);
    std::set<int> slow;
    for (const auto& v : verdicts) slow.insert(v.rank);
    bool changed = false;
    for (auto& [r, s] : ranks) {
      if (s.straggler && !slow.count(r)) {  // recovered: no event, the state says it
        s.straggler = false;
        if (s.state == "slow") s.state = "running";
        changed = true;
      }
    }
    for (const auto& v : verdicts) {
      RankState& s = rank(v.rank);
      if (s.straggler) continue;
      s.straggler = true;
      s.slow_phase = v.phase;
      if (s.state == "running" || s.state == "starting") s.state = "slow";
      changed = true;
      if (!replaying) {
        anomaly("straggler",
                "rank " + std::to_string(v.rank) + " is a straggler: busy " + fixed(v.busy_s * 1000, 1) +
                    " ms per step vs " + fixed(v.others_s * 1000, 1) + " ms for the other ranks (" +
                    fixed(v.others_s > 0 ? v.busy_s / v.others_s : 0, 1) + "x over the last " +
                    std::to_string(s.window.size()) + " steps); slowest phase: " + v.phase,
                {{"rank", v.rank},
                 {"node", s.node},
                 {"step", step},
                 {"phase", v.phase},
                 {"busy_s", v.busy_s},
                 {"others_s", v.others_s},
                 {"phase_excess_s", v.phase_excess_s}});
      }
    }
    if (changed) publish_state();
  }

  // Lines of a log, applied as they were when they were written (see the top of this file); they
  // are streamed to subscribers (a followed log updates the page) but not logged again.
  size_t replay(std::istream& in) {
    std::lock_guard<std::mutex> lock(mu);
    replaying = true;
    size_t lines = 0;
    std::string text;
    while (std::getline(in, text)) {
      if (text.empty()) continue;
      ++lines;
      const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!line.is_object()) continue;  // a torn last line of a killed agent
      const std::string type = text_at(line, "type");
      if (type == "metrics") {
        if (!integer_at(line, "rank") || !integer_at(line, "step") || *integer_at(line, "rank") < 0) continue;
        publish("metrics", text);
        apply_metrics(line, number_at(line, "t").value_or(0));
      } else if (type == "event") {
        if (!line.contains("kind") || !line["kind"].is_string()) continue;
        publish("event", text);
        apply_event(line);
      }
    }
    replaying = false;  // nothing above throws (parse errors are discarded lines)
    return lines;
  }

  void flush_pending_nans(double now, bool all) {
    for (auto& [r, s] : ranks) {
      if (!s.pending_nan) continue;
      if (!all && now - s.pending_nan->value_seen_at < kNanGraceS) continue;
      const RankState::PendingNan p = *s.pending_nan;
      s.pending_nan.reset();
      const std::string value = std::isnan(p.value) ? "NaN" : (p.value > 0 ? "+Inf" : "-Inf");
      anomaly("nan",
              "rank " + std::to_string(r) + " reported " + p.what + " = " + value + " at step " + std::to_string(p.step),
              {{"rank", r}, {"node", s.node}, {"step", p.step}, {"what", p.what}, {"value", value_json(p.value)}});
    }
  }
};

// ---------------------------------------------------------------------------------------------

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
  if (s.job_state != "running" || !s.progressed_this_round || s.stalled || s.options.stall_timeout_s <= 0) return;
  const double idle = now - s.progress_at;
  if (idle < s.options.stall_timeout_s) return;
  s.anomaly("stall",
            "no rank made progress for " + fixed(idle, 0) + " s (last step " + std::to_string(s.job_step) +
                "; --stall-timeout " + fixed(s.options.stall_timeout_s, 0) + " s)",
            {{"step", s.job_step}, {"idle_s", idle}});
}

nlohmann::json Hub::snapshot() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  json rank_history = json::object();
  for (const auto& [r, rs] : s.ranks) {
    json points = json::array();
    for (const auto& p : rs.history) points.push_back(p);
    rank_history[std::to_string(r)] = std::move(points);
  }
  json history = json::array();
  for (const auto& p : s.history) history.push_back(p);
  json events = json::array();
  for (const auto& e : s.events) events.push_back(e);
  return {{"job", s.job_json()},
          {"ranks", s.ranks_json()},
          {"history", std::move(history)},
          {"rank_history", std::move(rank_history)},
          {"events", std::move(events)},
          {"anomalies_total", s.anomalies_total},
          {"events_total", s.events_total}};
}

std::string Hub::prometheus_text() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  PrometheusText p;
  const std::string& job = s.job_name;
  const Labels base{{"job", job}};
  auto with = [&](Labels extra) {
    Labels l = base;
    l.insert(l.end(), extra.begin(), extra.end());
    return l;
  };
  p.family("cohort_up", "gauge", "1 while the agent that serves this endpoint runs.");
  p.sample(base, 1);
  p.family("cohort_world_size", "gauge", "Ranks in the current round.");
  p.sample(base, s.world_size);
  p.family("cohort_restarts_total", "counter", "Restarts of the job after a worker failure.");
  p.sample(base, s.restarts);
  p.family("cohort_job_state", "gauge", "1 for the job's current state, 0 for the others.");
  for (const char* st : kJobStates) p.sample(with({{"state", st}}), s.job_state == st ? 1 : 0);
  p.family("cohort_job_samples_per_second", "gauge", "Training samples per second of the whole job (sum over ranks).");
  {
    const json j = s.job_json();
    p.sample(base, j["samples_per_s"].is_number() ? j["samples_per_s"].get<double>() : 0.0);
  }
  auto per_rank = [&](const char* name, const char* type, const char* help, auto value_of) {
    p.family(name, type, help);
    for (const auto& [r, rs] : s.ranks) {
      if (auto v = value_of(rs)) p.sample(with({{"rank", std::to_string(r)}}), *v);
    }
  };
  using opt = std::optional<double>;
  per_rank("cohort_rank_step", "gauge", "The latest step a rank reported.",
           [](const RankState& rs) -> opt { return rs.step >= 0 ? opt(static_cast<double>(rs.step)) : std::nullopt; });
  per_rank("cohort_rank_steps_total", "counter", "Steps a rank reported during this run (all rounds).",
           [](const RankState& rs) -> opt { return static_cast<double>(rs.steps_total); });
  p.family("cohort_rank_state", "gauge", "1 for a rank's current state, 0 for the others.");
  for (const auto& [r, rs] : s.ranks) {
    for (const char* st : kRankStates) p.sample(with({{"rank", std::to_string(r)}, {"state", st}}), rs.state == st ? 1 : 0);
  }
  per_rank("cohort_step_seconds", "gauge", "Duration of a rank's last step.",
           [](const RankState& rs) { return number_at(rs.last, "step_s"); });
  p.family("cohort_phase_seconds", "gauge", "Time of a rank's last step spent in each phase.");
  for (const auto& [r, rs] : s.ranks) {
    if (!rs.last.is_object() || !rs.last.contains("phases") || !rs.last["phases"].is_object()) continue;
    for (const auto& [phase, v] : rs.last["phases"].items()) {
      if (auto d = number(v)) p.sample(with({{"rank", std::to_string(r)}, {"phase", phase}}), *d);
    }
  }
  per_rank("cohort_samples_per_second", "gauge", "Samples per second a rank processed in its last step.",
           [](const RankState& rs) { return number_at(rs.last, "samples_per_s"); });
  per_rank("cohort_grad_norm", "gauge", "Global L2 norm of the averaged gradients at a rank's last step.",
           [](const RankState& rs) { return number_at(rs.last, "grad_norm"); });
  per_rank("cohort_resident_memory_bytes", "gauge", "Resident memory of a rank's process.",
           [](const RankState& rs) { return number_at(rs.last, "rss_bytes"); });
  per_rank("cohort_cuda_memory_bytes", "gauge", "CUDA memory allocated by a rank's caching allocator.",
           [](const RankState& rs) { return number_at(rs.last, "cuda_bytes"); });
  per_rank("cohort_comm_bytes_total", "counter", "Bytes of collectives a rank completed during this run.",
           [](const RankState& rs) -> opt { return rs.comm_bytes_total; });
  per_rank("cohort_allreduce_busbw_bytes_per_second", "gauge",
           "Allreduce bus bandwidth of a rank's last step: bytes/comm time x 2(n-1)/n.",
           [](const RankState& rs) { return number_at(rs.last, "busbw"); });
  p.family("cohort_scalar", "gauge", "The scalars a rank gave at its last step (loss, lr, ...).");
  for (const auto& [r, rs] : s.ranks) {
    if (!rs.last.is_object() || !rs.last.contains("scalars") || !rs.last["scalars"].is_object()) continue;
    for (const auto& [name, v] : rs.last["scalars"].items()) {
      if (auto d = number(v)) p.sample(with({{"rank", std::to_string(r)}, {"name", name}}), *d);
    }
  }
  p.family("cohort_anomalies_total", "counter", "Anomalies detected during this run, by kind.");
  for (const char* k : {"nan", "loss_spike", "straggler", "stall"}) {
    auto it = s.anomalies_total.find(k);
    p.sample(with({{"kind", k}}), it == s.anomalies_total.end() ? 0 : static_cast<double>(it->second));
  }
  for (const auto& [k, n] : s.anomalies_total) {
    if (k != "nan" && k != "loss_spike" && k != "straggler" && k != "stall") p.sample(with({{"kind", k}}), static_cast<double>(n));
  }
  p.family("cohort_events_total", "counter", "Events logged during this run, by kind.");
  for (const auto& [k, n] : s.events_total) p.sample(with({{"kind", k}}), static_cast<double>(n));
  return p.text();
}

std::shared_ptr<Subscription> Hub::subscribe() {
  State& s = *state_;
  auto q = std::make_shared<Queue>();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) {
    q->close();
  } else {
    s.subscribers.push_back(q);
  }
  return q;
}

void Hub::close() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.closed = true;
  for (auto& w : s.subscribers) {
    if (auto q = w.lock()) q->close();
  }
  s.subscribers.clear();
}

size_t Hub::replay_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(-1, "cannot read the event log " + path + ": " + std::strerror(errno));
  return state_->replay(in);
}

size_t Hub::replay_text(const std::string& lines) {
  std::istringstream in(lines);
  return state_->replay(in);
}

}  // namespace cohort::hub
