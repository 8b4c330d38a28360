// The hang rule. See hang_detector.h.
#include "launcher/watch/hang_detector.h"

#include <cstdio>
#include <tuple>

namespace cohort::launcher {
namespace {

constexpr const char* kHangPrefix = "made no progress for ";

double seconds(HangDetector::clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string one_decimal(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string counters(const Heartbeat& h) {
  return "step " + std::to_string(h.step) + ", " + std::to_string(h.collectives) + " collectives completed";
}

}  // namespace

void HangDetector::heard(pid_t pid, const Heartbeat& heartbeat, clock::time_point now) {
  auto it = seen_.find(pid);
  if (it == seen_.end()) {
    seen_[pid] = Seen{heartbeat, now, now};
    return;
  }
  Seen& s = it->second;
  // Re-forming the groups around a replaced peer waits for the replacement to start: not a stall
  // (its heartbeats must still come), and the wait for progress starts again when it is done.
  if (!heartbeat.same_progress(s.last) || heartbeat.rejoining) s.progress_at = now;
  s.last = heartbeat;
  s.heard_at = now;
}

std::optional<HangDetector::Hang> HangDetector::check(clock::time_point now) const {
  if (timeout_s_ <= 0) return std::nullopt;
  // Has anyone crossed the line?
  bool crossed = false;
  for (const auto& [pid, s] : seen_) {
    const double silent = seconds(now - s.heard_at), stalled = seconds(now - s.progress_at);
    if (silent >= timeout_s_ || (s.last.training() && stalled >= timeout_s_)) crossed = true;
  }
  if (!crossed) return std::nullopt;

  // Whom to blame: the silent first, then the likeliest cause among the stalled.
  const double half = timeout_s_ / 2;
  const std::pair<const pid_t, Seen>* silent_pick = nullptr;
  const std::pair<const pid_t, Seen>* stalled_pick = nullptr;
  auto stalled_key = [&](const Seen& s) {
    // Smaller is likelier: outside a collective, fewer collectives completed, stalled longer.
    return std::make_tuple(s.last.waiting_in.empty() ? 0 : 1, s.last.collectives, -seconds(now - s.progress_at));
  };
  for (const auto& entry : seen_) {
    const Seen& s = entry.second;
    const double silent = seconds(now - s.heard_at), stalled = seconds(now - s.progress_at);
    if (silent >= half && (!silent_pick || s.heard_at < silent_pick->second.heard_at)) silent_pick = &entry;
    if (s.last.training() && stalled >= half && (!stalled_pick || stalled_key(s) < stalled_key(stalled_pick->second))) {
      stalled_pick = &entry;
    }
  }
  // The one to blame must have crossed the line itself — so that the report never says less than
  // the timeout — which takes at most a heartbeat longer: its progress was seen at a different
  // heartbeat than the one that crossed first.
  Hang hang;
  if (silent_pick) {
    const Seen& s = silent_pick->second;
    if (seconds(now - s.heard_at) < timeout_s_) return std::nullopt;
    hang.pid = silent_pick->first;
    hang.how = kHangPrefix + one_decimal(seconds(now - s.progress_at)) + " and sent no heartbeat for " +
               one_decimal(seconds(now - s.heard_at)) + " (stopped, or frozen?); last heard at " + counters(s.last);
    if (!s.last.waiting_in.empty()) hang.how += ", waiting in " + s.last.waiting_in;
    return hang;
  }
  if (!stalled_pick) return std::nullopt;  // unreachable: whoever crossed is stalled for at least half
  const Seen& s = stalled_pick->second;
  if (seconds(now - s.progress_at) < timeout_s_) return std::nullopt;
  hang.pid = stalled_pick->first;
  hang.how = kHangPrefix + one_decimal(seconds(now - s.progress_at)) + " (alive, at " + counters(s.last);
  hang.how += s.last.waiting_in.empty() ? "; not in a collective: stuck in the program itself?)"
                                        : "; waiting in " + s.last.waiting_in + ")";
  return hang;
}

bool is_hang(const std::string& how) { return how.rfind(kHangPrefix, 0) == 0; }

}  // namespace cohort::launcher
