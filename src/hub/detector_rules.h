// hub/detector_rules.h — the hub's detection rules as pure functions over numbers: medians, the
// straggler rule (which rank, which phase), the loss-spike rule. No state, no clocks, no JSON: the
// hub (hub/detect.cpp) keeps the windows and decides when to call these; tests call them directly.
// The rules and their defaults are documented in docs/monitoring.md ("Agent side").
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::hub {

/// The median of `values` (the mean of the two middle ones for an even count); NaN when empty.
double median(std::vector<double> values);

/// One rank's window of recent steps: "busy" seconds (step_s − comm_wait) and the phases measured.
struct RankWindow {
  int rank = 0;
  std::vector<double> busy;
  std::map<std::string, std::vector<double>> phases;  // data, forward, backward, optimizer
};

struct StragglerVerdict {
  int rank = 0;
  double busy_s = 0;      // the rank's median busy time over its window
  double others_s = 0;    // the median over the other ranks of their median busy times
  std::string phase;      // the phase whose median exceeds the others' by the most ("step" if none measured)
  double phase_excess_s = 0;
};

/// The straggler rule: a rank whose median busy time exceeds `factor` × the median of the other
/// ranks' median busy times, and by at least `min_excess_s`. Ranks with fewer than `min_points`
/// points are left out; fewer than two ranks with enough points: nobody is a straggler.
std::vector<StragglerVerdict> find_stragglers(const std::vector<RankWindow>& windows, double factor,
                                              double min_excess_s = 0.005, size_t min_points = 5);

/// The loss-spike rule: `loss` > factor × median(recent) once `recent` holds at least `min_points`
/// losses (and their median is positive).
bool is_loss_spike(double loss, const std::vector<double>& recent, double factor, size_t min_points = 10);

}  // namespace cohort::hub
