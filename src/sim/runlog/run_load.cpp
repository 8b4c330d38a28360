// Other work on a run's machine, from its event log. See run_load.h.
#include "runlog/run_load.h"

#include <algorithm>
#include <cmath>

namespace cohort::sim {

using nlohmann::json;

namespace {
double field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
}  // namespace

double load_threshold_cores(int cores) { return std::max(0.25, 0.1 * cores); }

void RunLoadReader::add(const json& line) {
  if (!line.is_object()) return;
  const auto type = line.find("type");
  if (type == line.end() || !type->is_string()) return;
  if (*type == "machine") {
    const double t = field(line, "t"), busy = field(line, "busy_cores"), steal = field(line, "steal_cores"),
                 cores = field(line, "cores");
    if (std::isfinite(t) && busy >= 0 && steal >= 0 && cores >= 1 && cores < (1 << 20))
      samples_.push_back({t, busy, steal, static_cast<int>(cores)});
  } else if (*type == "metrics") {
    const auto node = line.find("node");
    if (!all_nodes_ && node != line.end() && node->is_number_integer() && node->get<int>() != 0) return;
    const double t = field(line, "t"), cpu = field(line, "cpu_s"), step_s = field(line, "step_s");
    if (std::isfinite(t) && cpu >= 0) cpu_.push_back({std::isfinite(step_s) && step_s > 0 ? t - step_s : t, t, cpu});
  }
}

RunLoad RunLoadReader::finish() const {
  RunLoad load;
  if (samples_.size() < 2 || cpu_.empty()) return load;
  load.measured = true;
  auto samples = samples_;
  auto cpu = cpu_;
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.t < b.t; });
  std::sort(cpu.begin(), cpu.end(), [](const Cpu& a, const Cpu& b) { return a.t1 < b.t1; });
  double longest = 0;  // the longest step: how far past a window's end a record may end and still overlap it
  double first_t0 = INFINITY, last_t1 = -INFINITY;
  for (const auto& x : cpu) {
    longest = std::max(longest, x.t1 - x.t0);
    first_t0 = std::min(first_t0, x.t0);
    last_t1 = std::max(last_t1, x.t1);
  }
  load.cores = samples.back().cores;
  load.threshold_cores = load_threshold_cores(load.cores);
  size_t c = 0;
  for (size_t i = 1; i < samples.size(); ++i) {
    LoadWindow w;
    w.t0 = samples[i - 1].t;
    w.t1 = samples[i].t;
    const double dt = w.t1 - w.t0;
    if (!(dt > 0)) continue;
    // The job's CPU in the window: each record's CPU spread evenly over its step, the part inside
    // the window counted (steps as long as the window — the GPT's half second — would otherwise
    // put a whole step's CPU in one window and none in the next).
    double job = 0;
    while (c < cpu.size() && cpu[c].t1 <= w.t0) ++c;
    for (size_t k = c; k < cpu.size() && cpu[k].t1 < w.t1 + longest; ++k) {
      const Cpu& x = cpu[k];
      const double span = x.t1 - x.t0;
      if (span <= 0) {
        if (x.t1 > w.t0 && x.t1 <= w.t1) job += x.cpu_s;
        continue;
      }
      const double overlap = std::min(x.t1, w.t1) - std::max(x.t0, w.t0);
      if (overlap > 0) job += x.cpu_s * overlap / span;
    }
    w.foreign_cores = std::max(0.0, samples[i].busy - job / dt);
    w.steal_cores = samples[i].steal;
    // A window the job's steps do not cover whole also holds CPU outside any step (start-up, the
    // data's loading, a final evaluation): counted as other work it would flag the first and last
    // steps of a quiet run. Only windows inside the steps are judged.
    const bool inside = w.t0 >= first_t0 && w.t1 <= last_t1;
    w.loaded = inside && w.foreign_cores + w.steal_cores >= load.threshold_cores;
    load.windows.push_back(w);
  }
  return load;
}

bool RunLoad::loaded(double t0, double t1) const {
  for (const auto& w : windows)
    if (w.loaded && w.t0 < t1 && t0 < w.t1) return true;
  return false;
}

double RunLoad::mean_foreign(double t0, double t1) const {
  double sum = 0, n = 0;
  for (const auto& w : windows)
    if (w.t0 < t1 && t0 < w.t1) sum += w.foreign_cores, n += 1;
  return n > 0 ? sum / n : 0;
}

double RunLoad::mean_steal(double t0, double t1) const {
  double sum = 0, n = 0;
  for (const auto& w : windows)
    if (w.t0 < t1 && t0 < w.t1) sum += w.steal_cores, n += 1;
  return n > 0 ? sum / n : 0;
}

}  // namespace cohort::sim
