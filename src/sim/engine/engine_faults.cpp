// The simulation's faults and checkpoints (see engine.h): failures and hangs, what they cost (work
// back to the last durable checkpoint, detection, restart, restore, waiting for a repair), spares,
// elastic shrink and regrow; checkpoint stalls and their durability.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine.h"
#include "memory.h"

namespace cohort::sim {
namespace {

std::string fixed(double v, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << v;
  return out.str();
}

}  // namespace

double Simulation::checkpoint_bytes_per_node() const {
  // Sharded: the node's workers write their shares side by side; else rank 0 writes it all (and
  // at restore every node reads it all).
  const double per_worker = checkpoint_bytes_per_worker(p_, world());
  return p_.checkpoint_sharded ? per_worker * p_.workers_per_node : per_worker;
}

double Simulation::restore_s() const { return checkpoint_bytes_per_node() / p_.restore_bw; }

double Simulation::checkpoint_stall_s() const {
  const double write_s = checkpoint_bytes_per_node() / p_.checkpoint_bw;
  return p_.checkpoint_async ? checkpoint_bytes_per_worker(p_, world()) / p_.snapshot_bw : write_s;
}

double Simulation::draw_failure() {
  const double mean = p_.node_mtbf_h * 3600.0;
  if (mean <= 0) return kNever;
  return p_.failure_law == FailureLaw::weibull ? rng_.weibull(p_.weibull_shape, mean) : rng_.exponential(mean);
}

void Simulation::redraw_faults() {
  node_fail_at_.assign(static_cast<size_t>(std::max(0, active_nodes_)), kNever);
  for (auto& f : node_fail_at_) f = t_ + draw_failure();
  redraw_hang();
}

// Hangs of any node: one exponential clock for the job.
void Simulation::redraw_hang() {
  const double hang_mean = p_.node_mtbh_h * 3600.0;
  hang_at_ = hang_mean > 0 ? t_ + rng_.exponential(hang_mean / std::max(1, active_nodes_)) : kNever;
}

double Simulation::next_fault_time() const {
  double next = hang_at_;
  for (double f : node_fail_at_) next = std::min(next, f);
  return next;
}

void Simulation::take_checkpoint() {
  const double per_worker = checkpoint_bytes_per_worker(p_, world());
  const double write_s = checkpoint_bytes_per_node() / p_.checkpoint_bw;
  double stall = write_s;
  if (p_.checkpoint_async) {
    // The snapshot to host memory, after the previous write if it is still going (cohort waits).
    stall = std::max(0.0, write_free_at_ - t_) + per_worker / p_.snapshot_bw;
  }
  const double fault_at = std::max(t_, next_fault_time());
  if (t_ + stall > fault_at) {  // the fault comes during the stall: this checkpoint never was
    totals_.checkpoint_s += fault_at - t_;
    t_ = fault_at;
    fault(hang_at_ <= fault_at);
    return;
  }
  checkpoint_stalls_.emplace_back(t_, t_ + stall);
  totals_.checkpoint_s += stall;
  t_ += stall;
  const double done = p_.checkpoint_async ? t_ + write_s : t_;
  writes_.push_back({totals_.steps, totals_.useful_s, totals_.useful_samples, done});
  if (p_.checkpoint_async) write_free_at_ = done;
  finish_checkpoint_writes();
}

void Simulation::finish_checkpoint_writes() {
  while (!writes_.empty() && writes_.front().done_at <= t_) {
    const PendingWrite w = writes_.front();
    writes_.pop_front();
    durable_step_ = w.step;
    durable_useful_ = w.useful;
    durable_samples_ = w.samples;
    ++totals_.checkpoints;
    // Elastic and short of nodes, with one repaired: it rejoins from this checkpoint if the job is
    // still at it (a restart, but no work lost).
    if (p_.elastic && spares_ > 0 && active_nodes_ < target_nodes_ && w.step == totals_.steps && !down()) {
      --spares_;
      ++active_nodes_;
      ++totals_.regrows;
      ++totals_.restarts;
      const double restore = restore_s();
      totals_.restart_s += p_.warm_restart_s;
      totals_.restore_s += restore;
      resume_at_ = t_ + p_.warm_restart_s + restore;
      outages_.push_back({t_, resume_at_, -1, 0});
      event("regrow", "a repaired node rejoins: " + std::to_string(active_nodes_) + " nodes, restart from step " + std::to_string(w.step));
      node_fail_at_.push_back(t_ + draw_failure());
    }
  }
}

void Simulation::fault(bool hang) {
  finish_checkpoint_writes();  // those done before the fault count
  writes_.clear();             // the rest die with the job
  write_free_at_ = 0;
  const double lost = totals_.useful_s - durable_useful_;
  totals_.lost_work_s += lost;
  totals_.useful_s = durable_useful_;
  totals_.useful_samples = durable_samples_;
  const int64_t lost_steps = totals_.steps - durable_step_;
  totals_.steps = durable_step_;

  int node = 0;
  double detection = p_.detect_s;
  double restart = p_.restart_s;
  double wait = 0;
  std::string how;
  if (hang) {
    ++totals_.hangs;
    detection = p_.hang_detect_s;
    node = static_cast<int>(rng_.uniform() * active_nodes_);
    if (spares_ > 0) restart = p_.warm_restart_s;  // warm standby processes take over
    how = "a worker on node " + std::to_string(node) + " hung";
    hang_at_ = kNever;
  } else {
    ++totals_.failures;
    node = static_cast<int>(std::min_element(node_fail_at_.begin(), node_fail_at_.end()) - node_fail_at_.begin());
    node_fail_at_.erase(node_fail_at_.begin() + node);
    repair_at_.push_back(t_ + p_.repair_h * 3600.0);
    how = "node " + std::to_string(node) + " failed";
    if (spares_ > 0) {
      --spares_;
      restart = p_.warm_restart_s;
      node_fail_at_.push_back(t_ + draw_failure());
      how += "; a warm spare takes its place";
    } else if (p_.elastic && active_nodes_ - 1 >= p_.min_nodes) {
      --active_nodes_;
      ++totals_.shrinks;
      how += "; the job shrinks to " + std::to_string(active_nodes_) + " nodes";
    } else {
      // Wait for a node back: the earliest repair (this one's, or an earlier one's).
      auto first = std::min_element(repair_at_.begin(), repair_at_.end());
      wait = std::max(0.0, *first - (t_ + detection));
      repair_at_.erase(first);
      node_fail_at_.push_back(t_ + detection + wait + draw_failure());
      how += "; no spare: waiting " + fixed(wait / 3600.0, 2) + " h for a repaired node";
    }
  }
  const double restore = durable_step_ > 0 ? restore_s() : 0;
  totals_.detect_s += detection;
  totals_.restart_s += restart;
  totals_.repair_wait_s += wait;
  totals_.restore_s += restore;
  ++totals_.restarts;
  resume_at_ = t_ + detection + wait + restart + restore;
  outages_.push_back({t_, resume_at_, node * p_.workers_per_node, p_.workers_per_node});
  event(hang ? "hang" : "failure",
        how + "; " + std::to_string(lost_steps) + " steps lost, back to step " + std::to_string(durable_step_) +
            "; training again in " + fixed(resume_at_ - t_, 1) + " s");
}

void Simulation::resume() {
  reshape();
  redraw_hang();
  event("restart", "training again with " + std::to_string(world()) + " workers from step " + std::to_string(totals_.steps));
}

void Simulation::repairs_due() {
  for (size_t i = 0; i < repair_at_.size();) {
    if (repair_at_[i] <= t_) {
      repair_at_.erase(repair_at_.begin() + static_cast<long>(i));
      ++spares_;  // back as a spare (or to rejoin an elastic job at its next checkpoint)
    } else {
      ++i;
    }
  }
}

}  // namespace cohort::sim
