// The simulator (issue 17): a data-parallel job step by step and worker by worker, in simulated
// wall time. Each step samples every worker's compute, lets DDP's buckets go out in the order
// backward makes them (a bucket's collective starts once every worker made it and the previous
// one is done), and ends when the slowest worker's optimizer does. Between steps come what eats
// into useful time: checkpoints (a sync write, or an async snapshot with the write behind it),
// node failures and hangs (work back to the last durable checkpoint is lost; detection, a warm or
// cold restart, elastic shrink, the restore), and repairs.
//
// The simulation advances in slices (run_for), and set_params() between two slices changes what
// it does from then on, without a restart: that is how the page runs it live. Same parameters and
// seed: the same run, to the bit. No torch.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "budget.h"
#include "collectives.h"
#include "params.h"
#include "rng.h"

namespace cohort::sim {

/// Sums over steps; per-step means are sum / steps.
struct StepSums {
  double steps = 0;
  double step_s = 0;
  double compute_s = 0;   // the mean worker's own compute
  double exposed_s = 0;   // communication after the slowest worker's backward (not overlapped)
  double waiting_s = 0;   // the rest: waiting for slower workers
  double comm_s = 0;      // communication in all (overlapped or not)
  double samples = 0;
  void add(const StepSums& o);
};

struct Totals {
  double wall_s = 0;
  double useful_s = 0;        // step time of steps that were not lost
  double lost_work_s = 0;     // steps redone after a failure (back to the last durable checkpoint)
  double detect_s = 0;
  double restart_s = 0;
  double restore_s = 0;
  double repair_wait_s = 0;   // no spare, not elastic (or too few nodes): waiting for a repair
  double checkpoint_s = 0;    // stalls of the training for checkpoints
  int64_t steps = 0;          // progress: the step the job is at
  int64_t steps_run = 0;      // steps run, redone ones included
  int64_t failures = 0;
  int64_t hangs = 0;
  int64_t restarts = 0;
  int64_t checkpoints = 0;    // durable ones
  int64_t shrinks = 0;
  int64_t regrows = 0;
  double useful_samples = 0;
  double goodput() const { return wall_s > 0 ? useful_s / wall_s : 0; }
};

/// One point of the series, every sample_s of simulated time.
struct SeriesPoint {
  double t = 0;
  double samples_per_s = 0;   // useful samples in the interval / its length (0 while down)
  double goodput = 0;         // useful / wall, since the start
  double goodput_window = 0;  // ... in this interval
  int world = 0;
  int64_t step = 0;
  double step_s = 0;          // mean step time in the interval
};

struct Event {
  double t = 0;
  std::string kind;  // failure, hang, restart, shrink, regrow, checkpoint
  std::string message;
};

enum class WorkerState : uint8_t { computing, communicating, waiting, checkpointing, failed, restarting };
const char* worker_state_name(WorkerState s);

struct Segment {
  double t0, t1;
  WorkerState state;
};

class Simulation {
 public:
  /// Throws std::invalid_argument naming every bad parameter (validate()), or the memory plan's
  /// refusal (budget.h).
  explicit Simulation(const Params& p);

  /// New parameters from the next step on (a fault or restart in progress finishes as it was).
  /// A new node count resizes the job as if it had been started so; a new seed is ignored. Throws
  /// as the constructor does, and then goes on with the old parameters.
  void set_params(const Params& p);
  const Params& params() const { return p_; }

  /// Advances the simulated clock by `seconds` (to the end of the step that crosses it).
  void run_for(double seconds);
  /// Runs to params().hours.
  void run();
  bool finished() const { return t_ >= p_.hours * 3600.0; }
  double now() const { return t_; }

  int world() const { return active_nodes_ * p_.workers_per_node; }
  int active_nodes() const { return active_nodes_; }
  bool down() const { return t_ < resume_at_; }

  const Totals& totals() const { return totals_; }
  const StepSums& step_sums() const { return sums_; }
  /// The steps of the last series interval (the live breakdown).
  const StepSums& recent_sums() const { return last_interval_; }
  const std::vector<SeriesPoint>& series() const { return series_; }
  const std::deque<Event>& events() const { return events_; }  // the newest (up to 2000)
  int64_t events_emitted() const { return events_emitted_; }    // all there were

  /// One worker's step with the node to itself and no communication: the scaling baseline.
  double solo_step_s() const;
  /// A checkpoint's bytes written by one node, its stall of the training (the sync write, or the
  /// async snapshot), and the restore's read.
  double checkpoint_bytes_per_node() const;
  double checkpoint_stall_s() const;
  double restore_s() const;
  /// The per-bucket collective times of the current shape (seconds), in backward order.
  const std::vector<double>& bucket_comm_s() const { return bucket_comm_; }

  /// The timeline of timeline_workers workers over the last timeline_s seconds (or the shorter
  /// window of the memory plan): row i is worker timeline_worker(i).
  std::vector<std::vector<Segment>> timeline() const;
  /// The worker on row `row` of the timeline: a sample spread evenly over the world (the last of
  /// each of timeline_workers equal blocks, as the slow workers are placed), so that a sample of
  /// thousands of workers shows the slow ones and every node's share.
  int64_t timeline_worker(int row) const;
  /// The series' interval and the timeline's window within memory_budget_mb, and the one line that
  /// says what was down-sampled (budget.h).
  const MemoryPlan& memory_plan() const { return plan_; }

 private:
  struct StepRecord {
    double t0, bwd_max, sync, end;
    size_t first;  // into own_ (two floats per timeline worker: own backward end, own optimizer end)
  };
  struct Outage {
    double t0, t1;
    int first_worker, workers;  // the failed node's workers (failed), the rest restarting
  };
  static constexpr double kNever = 1e300;
  struct StepShape {
    double D, F, B, O;                // the phases of a worker at multiplier 1 (contention included)
    double fwd_end, bwd_max, sync, step, comm;
  };

  StepShape shape_of(double smax) const;  // a step whose slowest worker's multiplier is smax
  MemoryPlan plan() const;

  void reshape();                // bucket plan and collective costs for the current shape
  double draw_failure();         // one node's time to its next failure, from now
  void redraw_faults();
  void redraw_hang();
  double next_fault_time() const;
  void step_once(double limit);
  void fault(bool hang);
  void resume();
  void repairs_due();
  void finish_checkpoint_writes();
  void take_checkpoint();
  void sample_series();
  void record_step(const StepRecord& r, const float* own, int k);
  void prune_timeline();
  void event(const std::string& kind, const std::string& message);

  Params p_;
  Rng rng_;
  double t_ = 0;

  // Shape and its costs.
  int active_nodes_ = 1;
  int target_nodes_ = 1;   // what the job was started with (elastic regrows to it)
  int spares_ = 0;
  std::vector<double> repair_at_;      // failed nodes under repair
  std::vector<double> bucket_frac_;    // the fraction of backward after which each bucket is ready
  std::vector<double> bucket_comm_;    // its collective's time
  double after_step_comm_ = 0;         // ZeRO: parameter allgather after the optimizer
  double forward_gather_ = 0;          // ZeRO-3: gathers in the forward, per unit
  double compute_scale_ = 1;           // CPU contention of workers sharing a node's cores

  // Faults.
  std::vector<double> node_fail_at_;   // absolute times, one per active node
  double hang_at_ = 1e300;
  double resume_at_ = 0;

  // Checkpoints.
  int64_t durable_step_ = 0;
  double durable_useful_ = 0;
  double durable_samples_ = 0;
  struct PendingWrite {
    int64_t step;
    double useful, samples, done_at;
  };
  std::deque<PendingWrite> writes_;
  double write_free_at_ = 0;  // the background writer is busy until then

  // Outputs.
  MemoryPlan plan_;
  Totals totals_;
  StepSums sums_;
  StepSums interval_;
  StepSums last_interval_;
  double next_sample_ = 0;
  double interval_useful_ = 0;
  double interval_start_ = 0;
  std::vector<SeriesPoint> series_;
  std::deque<Event> events_;
  int64_t events_emitted_ = 0;
  std::deque<StepRecord> records_;
  std::deque<float> own_;
  size_t own_base_ = 0;  // own_ index of own_.front()
  std::deque<Outage> outages_;
  std::deque<std::pair<double, double>> checkpoint_stalls_;
  std::vector<float> scratch_;
};

}  // namespace cohort::sim
