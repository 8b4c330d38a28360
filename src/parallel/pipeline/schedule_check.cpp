// check_schedule(): the ranks' lists run against each other in rounds. A rank runs its next action
// as soon as what it needs is there; only a receive can wait (sends are buffered). Times do not
// depend on the order the ranks are visited in: a receive starts at the later of its rank's clock
// and the time its send ran, and nothing else crosses ranks. When a round moves no rank, the ranks
// still short of their ends all wait on receives: a deadlock.
#include "parallel/pipeline/schedule_check.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

namespace cohort::pipeline {
namespace {

using Key = std::tuple<int, int, int>;  // kind, stage, microbatch

Key key(ActionKind kind, int stage, int mb) { return {static_cast<int>(kind), stage, mb}; }

struct Sent {
  Action send;
  double time;
};

class Run {
 public:
  Run(const Schedule& s, const Costs& c) : s_(s), c_(c), pc_(s.ranks, 0), clock_(s.ranks, 0), done_(s.ranks) {
    report_.busy.assign(s.ranks, 0);
    report_.idle.assign(s.ranks, 0);
    report_.peak_stashed.assign(s.stages(), 0);
    report_.peak_held.assign(s.stages(), 0);
    stashed_.assign(s.stages(), 0);
    held_.assign(s.stages(), 0);
    for (const auto& list : s.actions) report_.start.emplace_back(list.size(), 0.0);
  }

  ScheduleReport go() {
    if (static_cast<int>(s_.actions.size()) != s_.ranks)
      return fail(Problem::placement, "the schedule has lists for " + std::to_string(s_.actions.size()) +
                                          " ranks, not " + std::to_string(s_.ranks));
    for (int r = 0; r < s_.ranks; ++r)
      for (const Action& a : s_.actions[r])
        if (!placed(r, a)) return report_;
    bool moved = true;
    while (moved && report_.ok()) {
      moved = false;
      for (int r = 0; r < s_.ranks && report_.ok(); ++r)
        while (pc_[r] < s_.actions[r].size() && report_.ok() && step(r)) moved = true;
    }
    if (!report_.ok()) return report_;
    if (!finished_all()) return deadlock();
    if (!complete()) return report_;
    for (int r = 0; r < s_.ranks; ++r) report_.makespan = std::max(report_.makespan, clock_[r]);
    for (int r = 0; r < s_.ranks; ++r) report_.idle[r] = report_.makespan - report_.busy[r];
    return report_;
  }

 private:
  ScheduleReport& fail(Problem p, const std::string& message) {
    report_.problem = p;
    report_.message = message;
    return report_;
  }
  static std::string rank_name(int r) { return "rank " + std::to_string(r); }

  bool placed(int r, const Action& a) {
    const int last = s_.stages() - 1;
    const std::string where = rank_name(r) + ": " + describe(a);
    if (a.stage < 0 || a.stage > last || a.microbatch < 0 || a.microbatch >= s_.microbatches) {
      fail(Problem::placement, where + ": no such stage or microbatch (" + std::to_string(s_.stages()) +
                                   " stages, " + std::to_string(s_.microbatches) + " microbatches)");
      return false;
    }
    if (s_.rank_of(a.stage) != r) {
      fail(Problem::placement, where + ": stage " + std::to_string(a.stage) + " lives on " + rank_name(s_.rank_of(a.stage)));
      return false;
    }
    int peer = -1;
    if (a.kind == ActionKind::send_activation && a.stage < last) peer = a.stage + 1;
    if (a.kind == ActionKind::recv_gradient && a.stage < last) peer = a.stage + 1;
    if (a.kind == ActionKind::recv_activation && a.stage > 0) peer = a.stage - 1;
    if (a.kind == ActionKind::send_gradient && a.stage > 0) peer = a.stage - 1;
    if (!is_compute(a.kind) && (peer < 0 || s_.rank_of(peer) == r)) {
      fail(Problem::placement, where + ": no stage on another rank to exchange it with");
      return false;
    }
    return true;
  }

  bool has(int r, ActionKind kind, int stage, int mb) const { return done_[r].count(key(kind, stage, mb)) > 0; }
  bool backward_done(int r, int stage, int mb) const {
    return has(r, ActionKind::input_grad, stage, mb) || has(r, ActionKind::full_backward, stage, mb);
  }

  // The link a send or receive travels on: (sender, receiver, gradients?).
  Key link(const Action& a) const {
    switch (a.kind) {
      case ActionKind::send_activation: return {s_.rank_of(a.stage), s_.rank_of(a.stage + 1), 0};
      case ActionKind::recv_activation: return {s_.rank_of(a.stage - 1), s_.rank_of(a.stage), 0};
      case ActionKind::send_gradient: return {s_.rank_of(a.stage), s_.rank_of(a.stage - 1), 1};
      default: return {s_.rank_of(a.stage + 1), s_.rank_of(a.stage), 1};
    }
  }

  // Runs rank r's next action; false when it must wait (a receive whose send has not run).
  bool step(int r) {
    const size_t index = pc_[r];
    const Action& a = s_.actions[r][index];
    const std::string who = rank_name(r) + " runs the " + describe(a);
    const int last = s_.stages() - 1;
    auto violate = [&](const std::string& why) {
      fail(Problem::dependency, who + " (action " + std::to_string(index) + ") " + why);
      return false;
    };
    if (is_compute(a.kind) && has(r, a.kind, a.stage, a.microbatch)) return violate("a second time");
    switch (a.kind) {
      case ActionKind::forward:
        if (a.stage > 0 && s_.rank_of(a.stage - 1) == r && !has(r, ActionKind::forward, a.stage - 1, a.microbatch))
          return violate("before the forward of stage " + std::to_string(a.stage - 1) + " on this rank");
        if (a.stage > 0 && s_.rank_of(a.stage - 1) != r && !has(r, ActionKind::recv_activation, a.stage, a.microbatch))
          return violate("before receiving its input from " + rank_name(s_.rank_of(a.stage - 1)));
        break;
      case ActionKind::input_grad:
      case ActionKind::full_backward:
        if (!has(r, ActionKind::forward, a.stage, a.microbatch)) return violate("before its forward");
        if (has(r, ActionKind::input_grad, a.stage, a.microbatch) || has(r, ActionKind::full_backward, a.stage, a.microbatch))
          return violate("after another backward of the same stage and microbatch");
        if (a.stage < last && s_.rank_of(a.stage + 1) == r && !backward_done(r, a.stage + 1, a.microbatch))
          return violate("before the backward of stage " + std::to_string(a.stage + 1) + " on this rank");
        if (a.stage < last && s_.rank_of(a.stage + 1) != r && !has(r, ActionKind::recv_gradient, a.stage, a.microbatch))
          return violate("before receiving its output's gradient from " + rank_name(s_.rank_of(a.stage + 1)));
        break;
      case ActionKind::weight_grad:
        if (!has(r, ActionKind::input_grad, a.stage, a.microbatch)) return violate("before its input gradient (B)");
        break;
      case ActionKind::send_activation:
        if (!has(r, ActionKind::forward, a.stage, a.microbatch)) return violate("before the forward that makes it");
        if (has(r, a.kind, a.stage, a.microbatch)) return violate("a second time");
        channels_[link(a)].push_back({a, clock_[r]});
        break;
      case ActionKind::send_gradient:
        if (!backward_done(r, a.stage, a.microbatch)) return violate("before the backward that makes it");
        if (has(r, a.kind, a.stage, a.microbatch)) return violate("a second time");
        channels_[link(a)].push_back({a, clock_[r]});
        break;
      case ActionKind::recv_activation:
      case ActionKind::recv_gradient: {
        auto& queue = channels_[link(a)];
        if (queue.empty()) return false;  // waits for the send
        const bool grad = a.kind == ActionKind::recv_gradient;
        const Action expected{grad ? ActionKind::send_gradient : ActionKind::send_activation,
                              grad ? a.stage + 1 : a.stage - 1, a.microbatch};
        if (!(queue.front().send == expected))
          return violate("while the next tensor " + rank_name(std::get<0>(link(a))) + " sends on that link is the " +
                         describe(queue.front().send) + " (a link delivers in order)");
        clock_[r] = std::max(clock_[r], queue.front().time);
        queue.pop_front();
        break;
      }
    }
    report_.start[r][index] = clock_[r];
    const double cost = a.kind == ActionKind::forward       ? c_.forward
                        : a.kind == ActionKind::input_grad  ? c_.input_grad
                        : a.kind == ActionKind::weight_grad ? c_.weight_grad
                        : a.kind == ActionKind::full_backward ? c_.full_backward
                                                              : 0.0;
    clock_[r] += cost;
    report_.busy[r] += cost;
    account(a);
    done_[r].insert(key(a.kind, a.stage, a.microbatch));
    ++pc_[r];
    return true;
  }

  // Stashes: a microbatch's activations stay from its F until its B/BW (stashed) or W/BW (held).
  void account(const Action& a) {
    const int s = a.stage;
    if (a.kind == ActionKind::forward) {
      report_.peak_stashed[s] = std::max(report_.peak_stashed[s], ++stashed_[s]);
      report_.peak_held[s] = std::max(report_.peak_held[s], ++held_[s]);
    }
    if (a.kind == ActionKind::input_grad || a.kind == ActionKind::full_backward) --stashed_[s];
    if (a.kind == ActionKind::weight_grad || a.kind == ActionKind::full_backward) --held_[s];
  }

  bool finished_all() const {
    for (int r = 0; r < s_.ranks; ++r)
      if (pc_[r] < s_.actions[r].size()) return false;
    return true;
  }

  ScheduleReport deadlock() {
    std::string message = "deadlock:";
    for (int r = 0; r < s_.ranks; ++r) {
      if (pc_[r] >= s_.actions[r].size()) continue;
      const Action& a = s_.actions[r][pc_[r]];
      const int from = std::get<0>(link(a));
      message += std::string(message.back() == ':' ? " " : "; ") + rank_name(r) + " waits at action " +
                 std::to_string(pc_[r]) + " for the " + describe(a) + " from " + rank_name(from) +
                 (pc_[from] >= s_.actions[from].size() ? ", which has finished without sending it"
                                                        : ", which is waiting itself");
    }
    return fail(Problem::deadlock, message);
  }

  bool complete() {
    for (const auto& [l, queue] : channels_)
      if (!queue.empty()) {
        fail(Problem::incomplete, rank_name(std::get<0>(l)) + " sends the " + describe(queue.front().send) + " to " +
                                      rank_name(std::get<1>(l)) + ", which never receives it");
        return false;
      }
    for (int st = 0; st < s_.stages(); ++st)
      for (int i = 0; i < s_.microbatches; ++i) {
        const int r = s_.rank_of(st);
        const std::string where = rank_name(r) + " never runs the ";
        if (!has(r, ActionKind::forward, st, i)) {
          fail(Problem::incomplete, where + describe({ActionKind::forward, st, i}));
          return false;
        }
        if (!backward_done(r, st, i)) {
          fail(Problem::incomplete, where + "backward (B or BW) of stage " + std::to_string(st) + ", microbatch " +
                                        std::to_string(i));
          return false;
        }
        if (has(r, ActionKind::input_grad, st, i) && !has(r, ActionKind::weight_grad, st, i)) {
          fail(Problem::incomplete, where + describe({ActionKind::weight_grad, st, i}));
          return false;
        }
      }
    return true;
  }

  const Schedule& s_;
  Costs c_;
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<std::set<Key>> done_;
  std::map<Key, std::deque<Sent>> channels_;
  std::vector<int> stashed_, held_;
  ScheduleReport report_;
};

}  // namespace

double ScheduleReport::idle_fraction() const {
  double idle_sum = 0;
  for (double t : idle) idle_sum += t;
  return makespan > 0 ? idle_sum / (makespan * static_cast<double>(idle.size())) : 0.0;
}

ScheduleReport check_schedule(const Schedule& schedule, const Costs& costs) { return Run(schedule, costs).go(); }

}  // namespace cohort::pipeline
