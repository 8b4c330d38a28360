// Calibration (issue 17): the simulator's parameters fitted to cohort's own runs, read from their
// event logs (RUN_DIR/events.jsonl, docs/monitoring.md), and predictions of other runs from them.
//
// What is fitted, and from what (docs/sim.md, "Calibration"):
// - a worker's compute per step as serial + parallel / threads (Amdahl), from the phase times of
//   runs with different threads per worker (cohort gives each of a node's w workers cores / w);
//   where the cores are oversubscribed the simulator adds the contention itself;
// - the split of the step into data, forward, backward and optimizer, and the spread between
//   workers (a robust estimate of how far a rank's compute strays from its step's mean);
// - the link's latency and bandwidth from the collectives' bytes and times per step;
// - checkpoint write bandwidth (checkpoint_saved), recovery time (failure to the next round's
//   first step).
// No torch.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "params.h"

namespace cohort::sim {

constexpr int kCalibrationVersion = 1;

/// One run, as its log shows it (medians over its steps after the first 20 %).
struct RunSummary {
  std::string dir;
  int world = 0, nodes = 1, workers_per_node = 0;
  int threads = 0;            // each worker's intra-op threads (cohort run's start event; 0: not logged)
  long long steps = 0;        // job steps seen
  double step_s = 0;          // rank 0's step time
  double compute_s = 0;       // data + forward + backward + optimizer, the median worker
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double comm_wait_s = 0;     // exposed communication
  double comm_s = 0, comm_bytes = 0;
  double spread = 0;          // robust std of a rank's compute / its step's mean, minus 1
  double checkpoint_bytes = 0, checkpoint_s = 0;
  double recovery_s = 0;      // failure to the next round's first step, the median (0: none)
  std::vector<double> recoveries;
  int torn_lines = 0;
  double first_bucket_bytes = 0;  // DDP's first gradient bucket, from its ddp_buckets event (0: not logged)
  // Load the simulator does not model (runlog/run_load.h), over the measured steps:
  bool load_measured = false;     // the log has machine samples and the workers' cpu_s
  double foreign_cores = 0;       // the machine's busy cores that were not the job's, mean
  double steal_cores = 0;
  long long loaded_steps = 0;     // measured steps that ran while other work loaded the machine (left out unless kept)
  double step_cv = 0;             // robust coefficient of variation of rank 0's step times
  std::vector<std::string> notes; // what the reader noticed, a line each (printed by the CLI)
};

/// Reads RUN_DIR/events.jsonl; throws std::runtime_error naming the run and what is wrong (no log,
/// empty, no step metrics, no phase times). Steps during which other work loaded the machine are
/// left out (a note says how many); a run with fewer than 10 clean steps is refused unless
/// `allow_load`, which keeps every step and says so in a note. `shared_machine`: the run's nodes
/// were namespaces of this one machine (all their ranks' CPU is the job's).
RunSummary summarize_run(const std::string& dir, bool allow_load = false, bool shared_machine = false);

struct Calibration {
  Params params;             // for the first run's shape
  double serial_s = 0;       // compute = serial_s + parallel_s / threads
  double parallel_s = 0;
  std::vector<int> fitted_threads;  // the threads per worker the compute fit saw (one: no split known)
  int cores = 0;
  bool shared_machine = false;  // the runs' nodes were namespaces of one machine, sharing its cores
  std::vector<RunSummary> runs;
};

/// shared_machine: the runs' nodes share the machine's cores (network namespaces on one host).
Calibration calibrate(const std::vector<RunSummary>& runs, int cores, bool shared_machine = false);
/// The parameters for a job of this shape on the calibrated machine; threads 0: what cohort run
/// gives each worker by default (cores / workers per node).
Params params_for(const Calibration& c, int nodes, int workers_per_node, int threads = 0);

nlohmann::json calibration_json(const Calibration& c);
/// Throws std::runtime_error when the JSON is not a calibration of this version.
Calibration calibration_from_json(const nlohmann::json& j, const std::string& what);

struct Prediction {
  RunSummary run;
  double predicted_step_s = 0;
  double step_error = 0;        // predicted / measured - 1
  double predicted_recovery_s = 0;
  double recovery_error = 0;
  int threads = 0;                  // the run's threads per worker, as the simulation gives them
  bool threads_fitted = true;       // false: a thread count the fit never saw, whose compute it guessed
};
Prediction predict(const Calibration& c, const RunSummary& run);

}  // namespace cohort::sim
