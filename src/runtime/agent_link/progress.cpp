// Process-wide progress counters. See progress.h and cohort/monitor.h.
#include "progress.h"

#include <atomic>

#include "cohort/monitor.h"
#include "flight_recorder.h"

namespace cohort {
namespace detail {
namespace {

std::atomic<int64_t> g_reported_step{-1};
std::atomic<int64_t> g_reports{0};
std::atomic<int64_t> g_ddp_iterations{0};

}  // namespace

Progress progress() {
  Progress p;
  p.reported_step = g_reported_step.load(std::memory_order_relaxed);
  p.reports = g_reports.load(std::memory_order_relaxed);
  p.ddp_iterations = g_ddp_iterations.load(std::memory_order_relaxed);
  p.collectives = flight_recorder().completed();
  return p;
}

void note_ddp_iteration() { g_ddp_iterations.fetch_add(1, std::memory_order_relaxed); }

}  // namespace detail

void report_step(int64_t step) {
  detail::g_reported_step.store(step, std::memory_order_relaxed);
  detail::g_reports.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace cohort
