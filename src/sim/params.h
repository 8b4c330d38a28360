// The simulator's inputs (issue 17): one flat struct, and one table (param_specs) that names each
// field with its unit, range and meaning. The CLI's --set, the JSON files, the calibration and the
// page's controls all go through that table, so a parameter is added in one place. No torch.
#pragma once

#include <string>
#include <vector>

namespace cohort::sim {

enum class Algorithm { ring, tree, hierarchical, shm, best };  // best: the fastest for the sizes
enum class FailureLaw { exponential, weibull };

struct Params {
  // The cluster.
  int nodes = 1;
  int workers_per_node = 2;
  double cores_per_node = 0;       // CPU cores a node's workers share; 0: no contention modelled
  double threads_per_worker = 1;   // compute threads each worker runs (contention when > cores)

  // The model and the step (seconds of one worker with the node to itself).
  double params = 1.0e6;           // parameters (elements)
  double bytes_per_grad = 4;       // fp32 gradients; compression scales what goes on the wire
  double batch_per_worker = 32;    // samples per worker per step
  double data_s = 0.0;
  double forward_s = 0.010;
  double backward_s = 0.020;
  double optimizer_s = 0.002;
  double compute_cv = 0.05;        // spread of a worker's step compute (std/mean)
  int slow_workers = 0;            // persistently slow workers
  double slow_factor = 1.5;        // ... their compute multiplier
  double straggle_prob = 0.0;      // chance a worker is slow in a step (transient)
  double straggle_factor = 2.0;
  double flops_per_sample = 0;     // > 0: forward+backward time from FLOPs / device throughput
  double device_flops = 0;         // ... sustained FLOP/s of one worker

  // Communication: DDP's buckets, the algorithm, an alpha-beta model per link level.
  double bucket_mb = 25;
  double first_bucket_mb = 1;      // DDP's first bucket (the last layers' gradients), as PyTorch's
  // When backward makes the gradient bytes: a fraction x of them is ready after x^e of its time.
  // 1: evenly; above 1: early (a model whose last layers hold most parameters, as a CNN's linear
  // head, makes most bytes at backward's start). calibrate fits it from link-bound runs.
  double grad_ready_exponent = 1;
  Algorithm algorithm = Algorithm::ring;
  double intra_latency_s = 5e-6;   // alpha inside a node (sockets on loopback)
  double intra_bw = 5e9;           // beta inside a node, bytes/s
  double shm_latency_s = 2e-6;     // the shared-memory path inside a node
  double shm_bw = 10e9;
  double inter_latency_s = 50e-6;  // alpha between nodes
  double inter_bw = 1.25e9;        // one node's NIC, bytes/s (10 Gbit/s)
  double compression = 1.0;        // bytes on the wire / gradient bytes (0.5: fp16)
  int zero_level = 0;              // 0: DDP; 1, 2, 3: ZeRO / sharded

  // Memory (bytes per parameter; fp32 Adam by default) and activations per sample.
  double bytes_per_param = 4;
  double optimizer_bytes_per_param = 8;
  double activation_bytes_per_sample = 0;

  // Faults.
  double node_mtbf_h = 0;          // mean time between failures of one node; 0: none
  FailureLaw failure_law = FailureLaw::exponential;
  double weibull_shape = 0.7;      // < 1: infant mortality, as measured on clusters
  double node_mtbh_h = 0;          // mean time between hangs of one node; 0: none
  double detect_s = 5;             // a dead worker noticed (cohort's heartbeats)
  double hang_detect_s = 30;       // a hung one (the hang timeout)
  double restart_s = 8;            // workers restarted from scratch (cold)
  double warm_restart_s = 0.5;     // with warm spares (the processes are up, torch loaded)
  int spare_nodes = 0;             // warm spare nodes waiting
  bool elastic = false;            // no spare: go on with the survivors
  int min_nodes = 1;               // elastic: fewer than this and the job waits for repairs
  double repair_h = 2;             // a failed node back (as a spare, or rejoining)

  // Checkpoints.
  int checkpoint_every = 0;        // steps; 0: none
  bool checkpoint_async = true;    // snapshot to memory, then write in the background
  double checkpoint_bw = 1e9;      // write bandwidth of one node, bytes/s
  double snapshot_bw = 5e9;        // async: copying the state to host memory, bytes/s
  double restore_bw = 2e9;         // read bandwidth of one node at restore, bytes/s
  bool checkpoint_sharded = true;  // every rank writes its share (else rank 0 writes all)

  // The run.
  double hours = 1;                // simulated wall time
  unsigned long long seed = 1;
  int timeline_workers = 32;       // workers whose timeline is kept (a sample spread over the world)
  double timeline_s = 10;          // the timeline's window, seconds
  double sample_s = 0;             // series sampling interval; 0: hours*3600/240
  double memory_budget_mb = 256;   // the series and the timeline past it: coarser, shorter (engine/budget.h)
};

/// One parameter: its name in JSON and --set, its unit, its range and what it is.
struct ParamSpec {
  const char* name;
  const char* unit;
  const char* group;
  double min;
  double max;
  const char* help;
  const char* choices;  // "a|b|c" for an enum, "bool" for a boolean, nullptr for a number
};

const std::vector<ParamSpec>& param_specs();

/// The value of a parameter as a number (enums: their index, booleans 0/1); nullptr name: throws.
double get_param(const Params& p, const std::string& name);
/// Sets one parameter from text ("25", "ring", "true"); an error message, or "" when set.
std::string set_param(Params& p, const std::string& name, const std::string& value);
/// The text form of a parameter's value (for JSON and the page).
std::string param_text(const Params& p, const std::string& name);

/// Every problem with a parameter set, one clear line each ("nodes is 0: must be at least 1").
std::vector<std::string> validate(const Params& p);

const char* algorithm_name(Algorithm a);
const char* failure_law_name(FailureLaw f);

}  // namespace cohort::sim
