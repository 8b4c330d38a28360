// The memory plan (see budget.h): what the series and the timeline would take, and what they may.
#include "budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cohort::sim {
namespace {

std::string budget_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  while (b >= 1024 && i < 6) {
    b /= 1024;
    ++i;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, i ? "%.3g %s" : "%.0f %s", b, units[i]);
  return buf;
}

std::string short_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Up to two significant digits, rounded up: a coarser interval that reads as a round figure and
// still fits.
double round_up_2(double v) {
  const double scale = std::pow(10.0, std::floor(std::log10(v)) - 1);
  return std::ceil(v / scale * (1 - 1e-12)) * scale;
}

}  // namespace

MemoryPlan plan_memory(const Params& p, double step_s, int world, double now, size_t points_so_far) {
  MemoryPlan plan;
  const double budget = p.memory_budget_mb * 1048576.0;
  plan.budget_bytes = budget;
  const double total_s = p.hours * 3600.0;
  const double rest_s = std::max(0.0, total_s - now);
  const double done = static_cast<double>(points_so_far);
  step_s = std::max(step_s, 1e-12);

  // As asked. The series gains a point every sample_s of the rest; the timeline keeps its window's
  // steps (at most the run's) for each of its workers.
  const double asked_sample = p.sample_s > 0 ? p.sample_s : total_s / 240.0;
  const double series = (done + std::floor(rest_s / asked_sample) + 1) * kSeriesPointBytes;
  const int k = std::max(0, std::min(p.timeline_workers, world));
  const double per_step = k > 0 ? kTimelineStepBytes + k * kTimelineWorkerStepBytes : 0;
  const double asked_steps = k > 0 ? std::floor(std::min(p.timeline_s, total_s) / step_s) + 1 : 0;
  const double timeline = asked_steps * per_step;
  plan.asked_bytes = series + timeline;

  // Shares: what one needs when it fits beside the other, else half each.
  double series_share = budget / 2, timeline_share = budget / 2;
  if (series + timeline <= budget || series <= budget / 2) {
    series_share = series;
    timeline_share = budget - series;
  } else if (timeline <= budget / 2) {
    timeline_share = timeline;
    series_share = budget - timeline;
  }

  std::string notes;
  plan.sample_s = asked_sample;
  if (series > series_share && rest_s > 0) {
    const double allowed = std::floor(series_share / kSeriesPointBytes) - done;
    plan.sample_s = std::max(asked_sample, round_up_2(rest_s / std::max(1.0, allowed - 1)));
    notes = "the series at sample_s = " + short_num(asked_sample) + " s would hold " + short_num(series / kSeriesPointBytes) +
            " points (~" + budget_bytes(series) + "): sampled every " + short_num(plan.sample_s) + " s instead";
  }
  const double series_planned = (done + std::floor(rest_s / plan.sample_s) + 1) * kSeriesPointBytes;

  plan.timeline_workers = k;
  plan.timeline_s = p.timeline_s;
  plan.timeline_steps = k > 0 ? std::floor(timeline_share / per_step * (1 + 1e-9)) : 0;
  if (k > 0 && plan.timeline_steps < 1) {
    plan.refusal = "timeline_workers = " + std::to_string(p.timeline_workers) + ": one step of their timeline takes ~" +
                   budget_bytes(per_step) + ", more than the memory budget leaves it (memory_budget_mb = " +
                   short_num(p.memory_budget_mb) + "): lower timeline_workers or raise memory_budget_mb";
    return plan;
  }
  if (asked_steps > plan.timeline_steps) {
    plan.timeline_s = std::min(p.timeline_s, plan.timeline_steps * step_s);
    notes += std::string(notes.empty() ? "" : "; ") + "the timeline of " + std::to_string(k) + " workers over timeline_s = " +
             short_num(p.timeline_s) + " s would take ~" + budget_bytes(timeline) + ": it keeps the last " +
             std::to_string(static_cast<long long>(plan.timeline_steps)) + " steps (~" + short_num(plan.timeline_s) + " s) instead";
  }
  plan.planned_bytes = series_planned + std::min(asked_steps, plan.timeline_steps) * per_step;
  if (!notes.empty()) notes = "memory budget " + budget_bytes(budget) + " (memory_budget_mb): " + notes;
  plan.notice = notes;
  return plan;
}

}  // namespace cohort::sim
