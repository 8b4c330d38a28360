// The hub's detection rules. See detector_rules.h.
#include "hub/detector_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cohort::hub {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<long>(mid));
  return (lower + upper) / 2;
}

std::vector<StragglerVerdict> find_stragglers(const std::vector<RankWindow>& windows, double factor,
                                              double min_excess_s, size_t min_points) {
  struct Summary {
    const RankWindow* w;
    double busy;
    std::map<std::string, double> phases;
  };
  std::vector<Summary> ranks;
  for (const RankWindow& w : windows) {
    if (w.busy.size() < min_points) continue;
    Summary s{&w, median(w.busy), {}};
    for (const auto& [name, values] : w.phases) {
      if (!values.empty()) s.phases[name] = median(values);
    }
    ranks.push_back(std::move(s));
  }
  std::vector<StragglerVerdict> out;
  if (ranks.size() < 2) return out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    // The others' median, not everyone's: with two ranks the median of both is their mean, which
    // would need the slow one to be 3x the fast one to pass a factor of 1.5.
    std::vector<double> others;
    for (size_t j = 0; j < ranks.size(); ++j) {
      if (j != i) others.push_back(ranks[j].busy);
    }
    const double m = median(others);
    const double mine = ranks[i].busy;
    if (!(mine > factor * m) || !(mine - m >= min_excess_s)) continue;
    StragglerVerdict v;
    v.rank = ranks[i].w->rank;
    v.busy_s = mine;
    v.others_s = m;
    v.phase = "step";
    v.phase_excess_s = -std::numeric_limits<double>::infinity();
    for (const auto& [name, value] : ranks[i].phases) {
      std::vector<double> theirs;
      for (size_t j = 0; j < ranks.size(); ++j) {
        if (j == i) continue;
        auto it = ranks[j].phases.find(name);
        if (it != ranks[j].phases.end()) theirs.push_back(it->second);
      }
      if (theirs.empty()) continue;
      const double excess = value - median(theirs);
      if (excess > v.phase_excess_s) {
        v.phase_excess_s = excess;
        v.phase = name;
      }
    }
    if (v.phase == "step") v.phase_excess_s = mine - m;
    out.push_back(v);
  }
  return out;
}

bool is_loss_spike(double loss, const std::vector<double>& recent, double factor, size_t min_points) {
  if (!std::isfinite(loss) || recent.size() < min_points) return false;
  const double m = median(recent);
  return m > 0 && loss > factor * m;
}

}  // namespace cohort::hub
