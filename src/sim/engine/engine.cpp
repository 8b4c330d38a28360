// The simulation loop (see engine.h for the model). Times inside a step are offsets from its start;
// `t_` is the simulated wall clock in seconds.
#include "engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "memory.h"

namespace cohort::sim {
namespace {

constexpr size_t kMaxBuckets = 4096;  // beyond, buckets are merged (the cost per step stays bounded)
constexpr size_t kMaxEvents = 2000;
// Whether worker w of n is one of the `slow` persistently slow ones, spread evenly over the job.
bool is_slow(int64_t w, int64_t n, int64_t slow) { return slow > 0 && ((w + 1) * slow) / n > (w * slow) / n; }

// Every problem of the set in one message.
void throw_if_invalid(const Params& p) {
  const auto errors = validate(p);
  if (errors.empty()) return;
  std::string all;
  for (const auto& e : errors) all += (all.empty() ? "" : "; ") + e;
  throw std::invalid_argument(all);
}

}  // namespace

void StepSums::add(const StepSums& o) {
  steps += o.steps;
  step_s += o.step_s;
  compute_s += o.compute_s;
  exposed_s += o.exposed_s;
  waiting_s += o.waiting_s;
  comm_s += o.comm_s;
  samples += o.samples;
}

const char* worker_state_name(WorkerState s) {
  switch (s) {
    case WorkerState::computing: return "computing";
    case WorkerState::communicating: return "communicating";
    case WorkerState::waiting: return "waiting";
    case WorkerState::checkpointing: return "checkpointing";
    case WorkerState::failed: return "failed";
    case WorkerState::restarting: return "restarting";
  }
  return "?";
}

Simulation::Simulation(const Params& p) : p_(p), rng_((throw_if_invalid(p), p.seed)) {
  active_nodes_ = target_nodes_ = p_.nodes;
  spares_ = p_.spare_nodes;
  reshape();
  plan_ = plan();
  if (!plan_.refusal.empty()) throw std::invalid_argument(plan_.refusal);
  next_sample_ = plan_.sample_s;
  redraw_faults();
}

MemoryPlan Simulation::plan() const { return plan_memory(p_, shape_of(1).step, world(), t_, series_.size()); }

void Simulation::set_params(const Params& p) {
  throw_if_invalid(p);
  const Params old = p_;
  const int old_active = active_nodes_, old_target = target_nodes_, old_spares = spares_;
  p_ = p;
  p_.seed = old.seed;
  if (p_.nodes != old.nodes) active_nodes_ = target_nodes_ = p_.nodes;
  if (p_.spare_nodes != old.spare_nodes) spares_ = std::max(0, spares_ + p_.spare_nodes - old.spare_nodes);
  reshape();
  const MemoryPlan next = plan();
  if (!next.refusal.empty()) {  // refused: nothing changed
    p_ = old;
    active_nodes_ = old_active;
    target_nodes_ = old_target;
    spares_ = old_spares;
    reshape();
    throw std::invalid_argument(next.refusal);
  }
  plan_ = next;
  prune_timeline();
  // Fault clocks restart under the new rates; an outage in progress ends as it was planned.
  if (p_.nodes != old.nodes || p_.node_mtbf_h != old.node_mtbf_h || p_.failure_law != old.failure_law ||
      p_.weibull_shape != old.weibull_shape || p_.node_mtbh_h != old.node_mtbh_h) {
    redraw_faults();
  }
}

double Simulation::solo_step_s() const {
  double fb = 0;
  if (p_.flops_per_sample > 0) fb = p_.batch_per_worker * p_.flops_per_sample / p_.device_flops;
  else fb = p_.forward_s + p_.backward_s;
  return p_.data_s + fb + p_.optimizer_s;
}

void Simulation::reshape() {
  const Topology topo{active_nodes_, p_.workers_per_node};
  const double grad_bytes = p_.params * p_.bytes_per_grad;
  compute_scale_ = 1;
  if (p_.cores_per_node > 0) compute_scale_ = std::max(1.0, p_.workers_per_node * p_.threads_per_worker / p_.cores_per_node);
  // CPU collectives inside a node (Gloo over loopback, the shared-memory path) compete for the
  // same cores as the compute; across nodes a collective waits on the network instead.
  const double comm_scale = topo.nodes > 1 ? 1.0 : compute_scale_;
  // DDP's plan: the first bucket (in backward order) capped at first_bucket_mb, the rest at
  // bucket_mb; beyond kMaxBuckets they are merged.
  const double cap = std::max(p_.bucket_mb * 1048576.0, grad_bytes / static_cast<double>(kMaxBuckets));
  const double first = std::min(cap, p_.first_bucket_mb * 1048576.0);
  std::vector<double> sizes;
  for (double done = 0; done < grad_bytes;) {
    const double b = std::min(sizes.empty() ? first : cap, grad_bytes - done);
    sizes.push_back(b);
    done += b;
  }
  if (sizes.empty()) sizes.push_back(0);
  const size_t n = sizes.size();
  bucket_frac_.assign(n, 0);
  bucket_comm_.assign(n, 0);
  forward_gather_ = 0;
  after_step_comm_ = 0;
  const double param_per_grad = p_.bytes_per_param / p_.bytes_per_grad;
  double made = 0;
  for (size_t k = 0; k < n; ++k) {
    const double bytes = sizes[k];
    made += bytes;
    bucket_frac_[k] = grad_bytes > 0 ? std::pow(std::min(1.0, made / grad_bytes), p_.grad_ready_exponent) : 1.0;
    const double wire = bytes * p_.compression;
    if (p_.zero_level == 0) {
      bucket_comm_[k] = allreduce_s(p_, topo, p_.algorithm, wire) * comm_scale;
    } else if (p_.zero_level < 3) {
      bucket_comm_[k] = reduce_scatter_s(p_, topo, p_.algorithm, wire) * comm_scale;
    } else {
      // Level 3: the unit's parameters gathered again for its backward, then its gradients reduced.
      const double gather = allgather_s(p_, topo, p_.algorithm, bytes * param_per_grad) * comm_scale;
      bucket_comm_[k] = gather + reduce_scatter_s(p_, topo, p_.algorithm, wire) * comm_scale;
      forward_gather_ += gather;
    }
  }
  // Levels 1 and 2: every worker's updated shard is gathered back after its optimizer step.
  if (p_.zero_level == 1 || p_.zero_level == 2) {
    after_step_comm_ = allgather_s(p_, topo, p_.algorithm, p_.params * p_.bytes_per_param) * comm_scale;
  }
  const size_t k = static_cast<size_t>(std::max(0, std::min(p_.timeline_workers, world())));
  scratch_.assign(k, 1.0f);
}

void Simulation::event(const std::string& kind, const std::string& message) {
  events_.push_back({t_, kind, message});
  ++events_emitted_;
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void Simulation::run() { run_for(p_.hours * 3600.0 - t_); }

void Simulation::run_for(double seconds) {
  const double end = std::min(t_ + std::max(0.0, seconds), p_.hours * 3600.0);
  while (t_ < end) {
    repairs_due();
    finish_checkpoint_writes();
    if (down()) {
      t_ = std::min({resume_at_, end, next_sample_});
      if (t_ >= resume_at_) resume();
    } else {
      step_once(std::min(end, next_sample_));
    }
    sample_series();
  }
  totals_.wall_s = t_;
}

Simulation::StepShape Simulation::shape_of(double smax) const {
  const double s = compute_scale_;
  double fb = p_.forward_s + p_.backward_s;
  double F = p_.forward_s * s, B = p_.backward_s * s;
  if (p_.flops_per_sample > 0) {
    fb = p_.batch_per_worker * p_.flops_per_sample / p_.device_flops;
    F = fb / 3 * s;  // backward costs twice the forward (the usual 1:2 of the FLOPs)
    B = fb * 2 / 3 * s;
  }
  const double D = p_.data_s * s, O = p_.optimizer_s * s;

  // The forward (level 3: each unit waits for its gather; gathers run ahead back to back).
  double fwd_end = smax * (D + F);
  if (forward_gather_ > 0) {
    const double units = static_cast<double>(bucket_comm_.size());
    double gathered = 0, f = smax * D;
    for (size_t u = 0; u < bucket_comm_.size(); ++u) {
      gathered += forward_gather_ / units;
      f = std::max(f, gathered) + smax * F / units;
    }
    fwd_end = f;
  }
  // The backward: bucket k ready once the slowest worker made it, its collective after the last.
  double free = fwd_end, comm = forward_gather_;
  for (size_t b = 0; b < bucket_comm_.size(); ++b) {
    const double ready = fwd_end + smax * B * bucket_frac_[b];
    free = std::max(free, ready) + bucket_comm_[b];
    comm += bucket_comm_[b];
  }
  const double bwd_max = fwd_end + smax * B;
  const double sync = std::max(bwd_max, free);
  const double step = sync + smax * O + after_step_comm_;
  comm += after_step_comm_;
  return {D, F, B, O, fwd_end, bwd_max, sync, step, comm};
}

void Simulation::step_once(double limit) {
  const int64_t n = world();
  const int k_timeline = static_cast<int>(scratch_.size());

  // Every worker's compute multiplier this step.
  double smax = 1, ssum = static_cast<double>(n);
  const bool noisy = p_.compute_cv > 0 || p_.straggle_prob > 0 || p_.slow_workers > 0;
  if (noisy) {
    smax = 0;
    ssum = 0;
    const double cv = p_.compute_cv, prob = p_.straggle_prob;
    for (int64_t w = 0; w < n; ++w) {
      double m = cv > 0 ? std::max(0.1, 1.0 + cv * rng_.fast_normal()) : 1.0;
      if (is_slow(w, n, p_.slow_workers)) m *= p_.slow_factor;
      if (prob > 0 && rng_.uniform() < prob) m *= p_.straggle_factor;
      smax = std::max(smax, m);
      ssum += m;
      if (is_slow(w, n, k_timeline)) scratch_[static_cast<size_t>((w * k_timeline) / n)] = static_cast<float>(m);  // timeline_worker()
    }
  }

  const StepShape sh = shape_of(smax);
  const double D = sh.D, F = sh.F, B = sh.B, O = sh.O;
  const double fwd_end = sh.fwd_end, bwd_max = sh.bwd_max, sync = sh.sync, step = sh.step, comm = sh.comm;

  StepSums one;
  one.steps = 1;
  one.step_s = step;
  one.compute_s = ssum / static_cast<double>(n) * (D + F + B + O);
  one.exposed_s = (sync - bwd_max) + after_step_comm_ + (fwd_end - smax * (D + F));
  one.waiting_s = std::max(0.0, step - one.compute_s - one.exposed_s);
  one.comm_s = comm;
  one.samples = static_cast<double>(n) * p_.batch_per_worker;

  // How many identical steps to take at once: one, unless nothing varies between steps.
  int64_t count = 1;
  const double fault_at = std::max(t_, next_fault_time());  // one due during an outage strikes now
  if (!noisy) {
    double stop = std::min(limit, fault_at);
    for (double r : repair_at_) stop = std::min(stop, r);
    if (!writes_.empty()) stop = std::min(stop, writes_.front().done_at);
    const double room = std::floor((stop - t_) / step);
    count = std::max<int64_t>(1, room > 1e15 ? 1 : static_cast<int64_t>(room));
    if (p_.checkpoint_every > 0) {
      const int64_t to_ckpt = p_.checkpoint_every - totals_.steps % p_.checkpoint_every;
      count = std::min(count, to_ckpt);
    }
  }

  if (t_ + step > fault_at) {  // the fault comes in the middle of this step
    totals_.lost_work_s += fault_at - t_;
    t_ = fault_at;
    fault(hang_at_ <= fault_at);
    return;
  }
  const double t0 = t_;
  const double dt = step * static_cast<double>(count);
  t_ += dt;
  totals_.steps += count;
  totals_.steps_run += count;
  totals_.useful_s += dt;
  totals_.useful_samples += one.samples * static_cast<double>(count);
  StepSums all = one;
  if (count > 1) {
    for (double* v : {&all.steps, &all.step_s, &all.compute_s, &all.exposed_s, &all.waiting_s, &all.comm_s, &all.samples}) {
      *v *= static_cast<double>(count);
    }
  }
  sums_.add(all);
  interval_.add(all);

  // The timeline keeps the steps of its window (of a batch of identical steps, only those).
  if (k_timeline > 0) {
    const double window = std::min(plan_.timeline_s / step + 1, plan_.timeline_steps);
    const int64_t keep = std::min<int64_t>(count, static_cast<int64_t>(window));
    std::vector<float> own(static_cast<size_t>(2 * k_timeline));
    for (int w = 0; w < k_timeline; ++w) {
      const double m = scratch_[static_cast<size_t>(w)];
      own[2 * w] = static_cast<float>(fwd_end - smax * (D + F) + m * (D + F + B));
      own[2 * w + 1] = static_cast<float>(m * O);
    }
    for (int64_t i = count - keep; i < count; ++i) {
      const double ts = t0 + step * static_cast<double>(i);
      record_step({ts, ts + bwd_max, ts + sync, ts + step, 0}, own.data(), k_timeline);
    }
    prune_timeline();
  }
  if (p_.checkpoint_every > 0 && totals_.steps % p_.checkpoint_every == 0) take_checkpoint();
}

void Simulation::sample_series() {
  while (t_ >= next_sample_) {
    const double len = next_sample_ - interval_start_;
    SeriesPoint pt;
    pt.t = next_sample_;
    pt.samples_per_s = len > 0 ? interval_.samples / len : 0;
    pt.goodput = totals_.useful_s / std::max(next_sample_, 1e-12);
    pt.goodput_window = len > 0 ? std::clamp((totals_.useful_s - interval_useful_) / len, 0.0, 1.0) : 0;
    pt.world = world();
    pt.step = totals_.steps;
    pt.step_s = interval_.steps > 0 ? interval_.step_s / interval_.steps : 0;
    series_.push_back(pt);
    if (interval_.steps > 0) last_interval_ = interval_;
    interval_ = StepSums{};
    interval_useful_ = totals_.useful_s;
    interval_start_ = next_sample_;
    next_sample_ += plan_.sample_s;
  }
}

}  // namespace cohort::sim
