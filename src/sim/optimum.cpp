// The checkpoint-interval sweep (see optimum.h).
#include "optimum.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/engine.h"

namespace cohort::sim {

Optimum optimum_interval(const Params& base, int points, double failures, int seeds) {
  if (base.node_mtbf_h <= 0) throw std::invalid_argument("the optimum checkpoint interval needs failures: node_mtbf_h is 0");
  Params p = base;
  p.compute_cv = 0;
  p.straggle_prob = 0;
  p.slow_workers = 0;
  p.timeline_workers = 0;
  p.node_mtbh_h = 0;
  Optimum out;
  out.job_mtbf_s = p.node_mtbf_h * 3600.0 / p.nodes;
  {
    Params probe = p;
    probe.checkpoint_every = 0;
    probe.node_mtbf_h = 0;
    probe.hours = 1e-3;
    Simulation s(probe);
    s.run_for(1e9);
    out.step_s = s.step_sums().steps > 0 ? s.step_sums().step_s / s.step_sums().steps : s.solo_step_s();
    out.delta_s = s.checkpoint_stall_s();
  }
  out.young_daly_s = std::sqrt(2.0 * out.delta_s * out.job_mtbf_s);
  out.simulated_hours = failures * out.job_mtbf_s / 3600.0;
  p.hours = out.simulated_hours;
  p.sample_s = p.hours * 3600.0;  // one series point: the sweep needs only the totals

  // Intervals from 1/8 to 8 times Young's, evenly on a log scale.
  long long last = -1;
  for (int i = 0; i < points; ++i) {
    const double f = std::pow(64.0, static_cast<double>(i) / (points - 1)) / 8.0;
    const long long every = std::max(1LL, std::llround(f * out.young_daly_s / out.step_s));
    if (every == last) continue;
    last = every;
    double sum = 0;
    for (int k = 0; k < seeds; ++k) {
      Params q = p;
      q.checkpoint_every = static_cast<int>(std::min<long long>(every, 1000000000LL));
      q.seed = base.seed + static_cast<unsigned long long>(k) * 7919ULL;
      Simulation s(q);
      s.run();
      sum += s.totals().goodput();
    }
    out.curve.push_back({every, static_cast<double>(every) * out.step_s, sum / seeds});
  }
  const auto best = std::max_element(out.curve.begin(), out.curve.end(),
                                     [](const IntervalPoint& a, const IntervalPoint& b) { return a.goodput < b.goodput; });
  out.best = *best;
  out.best_interval_s = best->interval_s;
  // Goodput is 1 - delta/tau - tau/2M near the optimum: symmetric in log(tau) (a cosh). A parabola
  // fitted by least squares to the points within a factor 3 of the best finds its vertex with far
  // less noise than the single best point.
  const double centre = std::log(best->interval_s);
  double s[5] = {0, 0, 0, 0, 0}, sy[3] = {0, 0, 0};
  int used = 0;
  for (const auto& c : out.curve) {
    const double x = std::log(c.interval_s) - centre;
    if (std::fabs(x) > std::log(3.0)) continue;
    double xp = 1;
    for (int k = 0; k < 5; ++k, xp *= x) s[k] += xp;
    sy[0] += c.goodput;
    sy[1] += x * c.goodput;
    sy[2] += x * x * c.goodput;
    ++used;
  }
  if (used >= 4) {
    // Normal equations of y = a + b x + c x^2, solved by Cramer's rule.
    const double m[3][3] = {{s[0], s[1], s[2]}, {s[1], s[2], s[3]}, {s[2], s[3], s[4]}};
    auto det3 = [](const double a[3][3]) {
      return a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
             a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
    };
    const double d = det3(m);
    double mb[3][3], mc[3][3];
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < 3; ++k) {
        mb[r][k] = k == 1 ? sy[r] : m[r][k];
        mc[r][k] = k == 2 ? sy[r] : m[r][k];
      }
    }
    const double b = det3(mb) / d, c = det3(mc) / d;
    if (d != 0 && c < 0) out.best_interval_s = std::exp(centre + std::clamp(-b / (2 * c), -std::log(3.0), std::log(3.0)));
  }
  return out;
}

}  // namespace cohort::sim
