// The simulation's timeline (see engine.h): the steps of the last timeline_s seconds for
// timeline_workers workers sampled evenly over the world, stored compactly and turned into
// segments when asked.
#include <algorithm>

#include "engine.h"

namespace cohort::sim {

void Simulation::record_step(const StepRecord& r, const float* own, int k) {
  StepRecord rec = r;
  rec.first = own_base_ + own_.size();
  records_.push_back(rec);
  own_.insert(own_.end(), own, own + 2 * k);
}

void Simulation::prune_timeline() {
  const double from = t_ - plan_.timeline_s;
  // The window's steps, and never more than the memory plan holds (a step can be shorter than the
  // plan's estimate).
  while (!records_.empty() && (records_.front().end < from || static_cast<double>(records_.size()) > plan_.timeline_steps)) {
    records_.pop_front();
    const size_t next = records_.empty() ? own_base_ + own_.size() : records_.front().first;
    const size_t drop = next - own_base_;
    own_.erase(own_.begin(), own_.begin() + static_cast<long>(drop));
    own_base_ = next;
  }
  while (!outages_.empty() && outages_.front().t1 < from) outages_.pop_front();
  while (!checkpoint_stalls_.empty() && checkpoint_stalls_.front().second < from) checkpoint_stalls_.pop_front();
}

int64_t Simulation::timeline_worker(int row) const {
  const auto k = static_cast<int64_t>(scratch_.size());
  const int64_t n = world();
  if (k <= 0 || n <= 0) return row;
  return ((static_cast<int64_t>(row) + 1) * n + k - 1) / k - 1;
}

std::vector<std::vector<Segment>> Simulation::timeline() const {
  const int k = static_cast<int>(scratch_.size());
  std::vector<std::vector<Segment>> rows(static_cast<size_t>(k));
  const double from = t_ - plan_.timeline_s;
  auto add = [](std::vector<Segment>& row, double a, double b, WorkerState s) {
    if (b <= a) return;
    if (!row.empty() && row.back().state == s && row.back().t1 >= a - 1e-12) {
      row.back().t1 = std::max(row.back().t1, b);
      return;
    }
    row.push_back({a, b, s});
  };
  for (const auto& r : records_) {
    if (r.end < from) continue;
    const size_t at = r.first - own_base_;
    for (int w = 0; w < k; ++w) {
      if (at + 2 * w + 1 >= own_.size()) break;
      auto& row = rows[static_cast<size_t>(w)];
      const double own_bwd = r.t0 + own_[at + 2 * w];
      const double own_opt = own_[at + 2 * w + 1];
      add(row, r.t0, own_bwd, WorkerState::computing);
      add(row, own_bwd, r.bwd_max, WorkerState::waiting);
      add(row, std::max(own_bwd, r.bwd_max), r.sync, WorkerState::communicating);
      add(row, r.sync, r.sync + own_opt, WorkerState::computing);
      add(row, r.sync + own_opt, r.end, after_step_comm_ > 0 ? WorkerState::communicating : WorkerState::waiting);
    }
  }
  for (const auto& [a, b] : checkpoint_stalls_) {
    for (auto& row : rows) add(row, a, b, WorkerState::checkpointing);
  }
  for (const auto& o : outages_) {
    for (int w = 0; w < k; ++w) {
      const int64_t id = timeline_worker(w);
      const bool failed = id >= o.first_worker && id < o.first_worker + o.workers;
      add(rows[static_cast<size_t>(w)], o.t0, std::min(o.t1, t_), failed ? WorkerState::failed : WorkerState::restarting);
    }
  }
  for (auto& row : rows) {
    std::sort(row.begin(), row.end(), [](const Segment& a, const Segment& b) { return a.t0 < b.t0; });
  }
  return rows;
}

}  // namespace cohort::sim
