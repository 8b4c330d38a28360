// Shared by the hub's tests (hub_test.cpp, hub_outputs_test.cpp): the messages workers would send,
// and ways to read the hub's snapshot. No processes, no torch.
#pragma once

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hub/hub.h"

namespace hub_test {

using nlohmann::json;
using cohort::hub::Hub;

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A worker's metrics message as the spec shows it. `extra_busy_s` goes into the named phase.
inline json metrics(int rank, int64_t step, double loss, double busy_s = 0.010, const std::string& slow_phase = "",
                    double extra_s = 0, int restart = 0) {
  std::map<std::string, double> phases{{"data", 0.001}, {"forward", 0.004}, {"backward", 0.004}, {"optimizer", 0.001}};
  if (!slow_phase.empty()) phases[slow_phase] += extra_s;
  double busy = 0;
  for (auto& [k, v] : phases) busy += v;
  (void)busy_s;
  // Synchronous training: every rank's step takes as long as the slowest; the rest is comm_wait.
  const double step_s = 0.010 + extra_s + 0.002;
  json p = json::object();
  for (auto& [k, v] : phases) p[k] = v;
  p["comm_wait"] = step_s - busy;
  json m{{"type", "metrics"},  {"pid", 1000 + rank}, {"rank", rank},   {"world_size", 2},
         {"restart", restart}, {"step", step},       {"t", 1.7e9 + static_cast<double>(step)},
         {"step_s", step_s},   {"phases", p},        {"samples", 64},  {"samples_per_s", 64 / step_s},
         {"grad_norm", 1.5},   {"rss_bytes", 100000000}, {"comm_bytes", 1000}, {"comm_s", 0.001},
         {"busbw", 1e6}};
  if (std::isnan(loss)) m["scalars"] = {{"loss", "nan"}, {"lr", 0.01}};
  else m["scalars"] = {{"loss", loss}, {"lr", 0.01}};
  return m;
}

inline std::vector<json> events_of(const json& snapshot, const std::string& kind, const std::string& anomaly = "") {
  std::vector<json> out;
  for (const auto& e : snapshot["events"]) {
    if (e.value("kind", "") == kind && (anomaly.empty() || e.value("anomaly", "") == anomaly)) out.push_back(e);
  }
  return out;
}

inline json rank_of(const json& snapshot, int rank) {
  for (const auto& r : snapshot["ranks"]) {
    if (r["rank"] == rank) return r;
  }
  return nullptr;
}

// Two ranks, `steps` steps; rank 1 slow in `phase` by extra_s from `from` on.
inline void feed_two_ranks(Hub& hub, int64_t first, int64_t steps, const std::string& phase = "", double extra_s = 0,
                           int64_t from = 0, double loss = 1.0) {
  for (int64_t s = first; s < first + steps; ++s) {
    const bool slow = !phase.empty() && s >= from;
    hub.worker_message(metrics(0, s, loss, 0.01, "", slow ? extra_s : 0), 0);
    hub.worker_message(metrics(1, s, loss, 0.01, slow ? phase : "", slow ? extra_s : 0), 0);
  }
}

}  // namespace hub_test
