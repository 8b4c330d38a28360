// Membership rules of an elastic job. See membership.h.
#include "launcher/elastic/membership.h"

#include <algorithm>

namespace cohort::launcher {

Seating seat_nodes(std::vector<Candidate> candidates, int max_nodes) {
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  Seating s;
  for (const Candidate& c : candidates) {
    if (static_cast<int>(s.seats.size()) == max_nodes) break;
    s.seats.push_back({c.id, static_cast<int>(s.seats.size()), s.world_size});
    s.world_size += c.nproc;
  }
  return s;
}

bool Gathering::ready(int present, Clock::time_point now) {
  if (present >= max_) return true;
  if (present < min_) {
    min_reached_.reset();  // someone left: the settle time starts again at MIN
    return false;
  }
  if (!min_reached_) min_reached_ = now;
  return now - *min_reached_ >= std::chrono::milliseconds(static_cast<int64_t>(settle_s_ * 1000));
}

int Gathering::ms_to_settle(Clock::time_point now) const {
  if (!min_reached_) return -1;
  const auto end = *min_reached_ + std::chrono::milliseconds(static_cast<int64_t>(settle_s_ * 1000));
  return static_cast<int>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count()));
}

}  // namespace cohort::launcher
