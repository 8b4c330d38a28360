// The job clock's process-wide state. See job_clock.h.
#include "job_clock.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>

namespace cohort::detail {
namespace {

int64_t read_shift_ns() {
  const char* text = std::getenv("COHORT_TEST_CLOCK_SHIFT_S");
  if (!text || !*text) return 0;
  char* end = nullptr;
  const double s = std::strtod(text, &end);
  if (end == text || !std::isfinite(s) || std::fabs(s) > 1e6) return 0;  // a test's knob: ignore nonsense
  return static_cast<int64_t>(s * 1e9);
}

// The offset as three relaxed atomics plus a sequence number, so that a reader never mixes two
// measurements (written once at init and at a rejoin; read once a step).
std::atomic<uint64_t> g_seq{0};
std::atomic<double> g_offset{0}, g_error{0};
std::atomic<int64_t> g_measured{0};

}  // namespace

int64_t own_clock_shift_ns() noexcept {
  static const int64_t shift = read_shift_ns();
  return shift;
}

int64_t own_clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         own_clock_shift_ns();
}

void set_clock_offset(const ClockOffset& offset) noexcept {
  g_seq.fetch_add(1, std::memory_order_acq_rel);  // odd: being written
  g_offset.store(offset.offset_s, std::memory_order_relaxed);
  g_error.store(offset.error_s, std::memory_order_relaxed);
  g_measured.store(offset.measured_ns, std::memory_order_relaxed);
  g_seq.fetch_add(1, std::memory_order_release);
}

ClockOffset clock_offset() noexcept {
  ClockOffset out;
  for (;;) {
    const uint64_t before = g_seq.load(std::memory_order_acquire);
    out.offset_s = g_offset.load(std::memory_order_relaxed);
    out.error_s = g_error.load(std::memory_order_relaxed);
    out.measured_ns = g_measured.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (!(before & 1) && g_seq.load(std::memory_order_relaxed) == before) return out;
  }
}

double job_seconds(int64_t own_ns) noexcept {
  return static_cast<double>(own_ns) / 1e9 + g_offset.load(std::memory_order_relaxed);
}

}  // namespace cohort::detail
