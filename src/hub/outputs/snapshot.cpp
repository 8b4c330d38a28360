// The hub's snapshot (Hub::snapshot, GET /api/state): everything the page needs to draw from
// scratch, and the job/rank JSON pieces that the "state" stream message shares with it. Read-only:
// nothing here changes the state; /metrics is hub/outputs/prometheus.cpp.
#include <algorithm>
#include <cmath>

#include "hub/state.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

json Hub::State::job_json() const {
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

json Hub::State::rank_json(const RankState& s) const {
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
  copy("compression");
  copy("t");
  r["phases"] = m.is_object() && m.contains("phases") && m["phases"].is_object() ? m["phases"] : json::object();
  r["scalars"] = m.is_object() && m.contains("scalars") && m["scalars"].is_object() ? m["scalars"] : json::object();
  return r;
}

json Hub::State::ranks_json() const {
  json out = json::array();
  for (const auto& [r, s] : ranks) out.push_back(rank_json(s));
  return out;
}

nlohmann::json Hub::snapshot() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  json rank_history = json::object();
  json timelines = json::object();
  for (const auto& [r, rs] : s.ranks) {
    json points = json::array();
    for (const auto& p : rs.history) points.push_back(p);
    rank_history[std::to_string(r)] = std::move(points);
    if (!rs.timelines.empty()) timelines[std::to_string(r)] = json::array_t(rs.timelines.begin(), rs.timelines.end());
  }
  json history = json::array();
  for (const auto& p : s.history) history.push_back(p);
  json events = json::array();
  for (const auto& e : s.events) events.push_back(e);
  return {{"job", s.job_json()},
          {"ranks", s.ranks_json()},
          {"history", std::move(history)},
          {"rank_history", std::move(rank_history)},
          {"timelines", std::move(timelines)},
          {"events", std::move(events)},
          {"anomalies_total", s.anomalies_total},
          {"events_total", s.events_total}};
}

}  // namespace cohort::hub
