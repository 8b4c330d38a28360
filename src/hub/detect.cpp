// The hub's detectors, run on the state the inputs built (hub/state.h): a job step drawn once every
// rank reported it (the history point), the loss spike, the straggler, NaN/Inf no worker reported,
// the stall. The rules themselves (medians, thresholds) are pure functions in detector_rules.*;
// this file keeps their windows and turns verdicts into rank states and anomaly events. Not here:
// reading the inputs (hub.cpp) or writing outputs (hub/outputs/snapshot.cpp, hub/outputs/prometheus.cpp).
//
// During replay (hub/replay.cpp) the detectors still update the rank states (a straggler that
// recovered has no event of its own) but raise no events: the logged anomaly events do that.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "hub/detector_rules.h"
#include "hub/state.h"

namespace cohort::hub {

using nlohmann::json;
using namespace detail;

namespace {
constexpr double kNanGraceS = 1.0;  // a worker's own nan event may follow its metrics this late
}  // namespace

void Hub::State::finalize_through(int64_t last) {
  while (!pending.empty() && pending.begin()->first <= last) {
    const int64_t step = pending.begin()->first;
    const PendingStep ps = pending.begin()->second;
    pending.erase(pending.begin());
    finalize(step, ps);
  }
}

void Hub::State::finalize(int64_t step, const PendingStep& ps) {
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

void Hub::State::check_stragglers(int64_t step) {
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

void Hub::State::flush_pending_nans(double now, bool all) {
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

void Hub::State::check_stall(double now) {
  if (job_state != "running" || !progressed_this_round || stalled || options.stall_timeout_s <= 0) return;
  const double idle = now - progress_at;
  if (idle < options.stall_timeout_s) return;
  anomaly("stall",
          "no rank made progress for " + fixed(idle, 0) + " s (last step " + std::to_string(job_step) +
              "; --stall-timeout " + fixed(options.stall_timeout_s, 0) + " s)",
          {{"step", job_step}, {"idle_s", idle}});
}

}  // namespace cohort::hub
