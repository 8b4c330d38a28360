// The parameter table (see params.h): each field once, with its range; validation and the text
// forms read it. Ranges are what a real job can have, so a typo (a bandwidth of -1, MTBF 0 meant as
// "none") is refused with the parameter's name rather than simulated into NaNs.
#include "params.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace cohort::sim {
namespace {

enum class Kind { real, integer, boolean, algorithm, failure_law, seed };

struct Entry {
  ParamSpec spec;
  Kind kind;
  double Params::*real = nullptr;
  int Params::*integer = nullptr;
  bool Params::*boolean = nullptr;
};

constexpr double kInf = 1e300;

#define REAL(f, unit, group, lo, hi, help) \
  Entry { {#f, unit, group, lo, hi, help, nullptr}, Kind::real, &Params::f }
#define INT(f, unit, group, lo, hi, help) \
  Entry { {#f, unit, group, lo, hi, help, nullptr}, Kind::integer, nullptr, &Params::f }
#define BOOL(f, group, help) \
  Entry { {#f, "", group, 0, 1, help, "bool"}, Kind::boolean, nullptr, nullptr, &Params::f }

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      INT(nodes, "", "cluster", 1, 100000, "nodes in the job"),
      INT(workers_per_node, "", "cluster", 1, 1024, "workers (ranks) per node"),
      REAL(cores_per_node, "", "cluster", 0, 4096, "CPU cores the node's workers share (0: no contention)"),
      REAL(threads_per_worker, "", "cluster", 1, 4096, "compute threads per worker"),
      REAL(params, "", "model", 1, 1e13, "model parameters"),
      REAL(bytes_per_grad, "B", "model", 0.125, 16, "bytes per gradient element"),
      REAL(batch_per_worker, "samples", "model", 1, 1e9, "samples per worker per step"),
      REAL(data_s, "s", "step", 0, 3600, "data loading per step"),
      REAL(forward_s, "s", "step", 0, 3600, "forward per step"),
      REAL(backward_s, "s", "step", 0, 3600, "backward per step"),
      REAL(optimizer_s, "s", "step", 0, 3600, "optimizer per step"),
      REAL(compute_cv, "", "step", 0, 2, "spread of a worker's compute (std/mean)"),
      INT(slow_workers, "", "step", 0, 100000000, "persistently slow workers"),
      REAL(slow_factor, "x", "step", 1, 100, "their compute multiplier"),
      REAL(straggle_prob, "", "step", 0, 1, "chance a worker straggles in a step"),
      REAL(straggle_factor, "x", "step", 1, 100, "a straggling step's compute multiplier"),
      REAL(flops_per_sample, "FLOP", "step", 0, 1e18, "forward+backward FLOPs per sample (0: use the times)"),
      REAL(device_flops, "FLOP/s", "step", 0, 1e18, "a worker's sustained FLOP/s (with flops_per_sample)"),
      REAL(bucket_mb, "MiB", "network", 0.001, 1e6, "DDP bucket size"),
      REAL(first_bucket_mb, "MiB", "network", 0.001, 1e6, "DDP's first bucket (communication starts early)"),
      REAL(grad_ready_exponent, "", "network", 0.05, 20, "gradient bytes x ready after x^e of backward (1: evenly; >1: early)"),
      Entry{{"algorithm", "", "network", 0, 4, "allreduce algorithm", "ring|tree|hierarchical|shm|best"}, Kind::algorithm},
      REAL(intra_latency_s, "s", "network", 0, 10, "latency inside a node"),
      REAL(intra_bw, "B/s", "network", 1, 1e15, "bandwidth inside a node"),
      REAL(shm_latency_s, "s", "network", 0, 10, "shared-memory path latency"),
      REAL(shm_bw, "B/s", "network", 1, 1e15, "shared-memory path bandwidth"),
      REAL(inter_latency_s, "s", "network", 0, 10, "latency between nodes"),
      REAL(inter_bw, "B/s", "network", 1, 1e15, "a node's NIC bandwidth"),
      REAL(compression, "", "network", 0.001, 1, "bytes on the wire per gradient byte"),
      INT(zero_level, "", "network", 0, 3, "0: DDP; 1-3: ZeRO level"),
      REAL(bytes_per_param, "B", "memory", 0.125, 16, "bytes per parameter"),
      REAL(optimizer_bytes_per_param, "B", "memory", 0, 64, "optimizer state bytes per parameter"),
      REAL(activation_bytes_per_sample, "B", "memory", 0, 1e12, "activation memory per sample"),
      REAL(node_mtbf_h, "h", "faults", 0, 1e9, "mean time between failures of a node (0: none)"),
      Entry{{"failure_law", "", "faults", 0, 1, "time-to-failure distribution", "exponential|weibull"}, Kind::failure_law},
      REAL(weibull_shape, "", "faults", 0.1, 10, "Weibull shape (<1: early failures)"),
      REAL(node_mtbh_h, "h", "faults", 0, 1e9, "mean time between hangs of a node (0: none)"),
      REAL(detect_s, "s", "faults", 0, 86400, "time to notice a dead worker"),
      REAL(hang_detect_s, "s", "faults", 0, 86400, "time to notice a hung worker"),
      REAL(restart_s, "s", "faults", 0, 86400, "cold restart of the workers"),
      REAL(warm_restart_s, "s", "faults", 0, 86400, "restart onto warm spares"),
      INT(spare_nodes, "", "faults", 0, 100000, "warm spare nodes"),
      BOOL(elastic, "faults", "without a spare, go on with the survivors"),
      INT(min_nodes, "", "faults", 1, 100000, "elastic: the fewest nodes that train"),
      REAL(repair_h, "h", "faults", 0, 1e6, "a failed node back"),
      INT(checkpoint_every, "steps", "checkpoint", 0, 1000000000, "steps between checkpoints (0: none)"),
      BOOL(checkpoint_async, "checkpoint", "snapshot, then write in the background"),
      REAL(checkpoint_bw, "B/s", "checkpoint", 1, 1e15, "a node's write bandwidth"),
      REAL(snapshot_bw, "B/s", "checkpoint", 1, 1e15, "async: copy to host memory"),
      REAL(restore_bw, "B/s", "checkpoint", 1, 1e15, "a node's read bandwidth at restore"),
      BOOL(checkpoint_sharded, "checkpoint", "every rank writes its share"),
      REAL(hours, "h", "run", 1e-6, 1e5, "simulated wall time"),
      Entry{{"seed", "", "run", 0, 1.8e19, "random seed", nullptr}, Kind::seed},
      INT(timeline_workers, "", "run", 0, 4096, "workers on the timeline"),
      REAL(timeline_s, "s", "run", 0.001, 1e6, "the timeline's window"),
      REAL(sample_s, "s", "run", 0, 1e9, "series sampling interval (0: hours/240)"),
      REAL(memory_budget_mb, "MiB", "run", 1, 65536, "memory for the series and the timeline (past it: coarser, shorter)"),
  };
  return table;
}

const Entry* find(const std::string& name) {
  for (const auto& e : entries()) {
    if (name == e.spec.name) return &e;
  }
  return nullptr;
}

const char* const kAlgorithms[] = {"ring", "tree", "hierarchical", "shm", "best"};
const char* const kLaws[] = {"exponential", "weibull"};

std::string number_text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

}  // namespace

const std::vector<ParamSpec>& param_specs() {
  static const std::vector<ParamSpec> specs = [] {
    std::vector<ParamSpec> v;
    for (const auto& e : entries()) v.push_back(e.spec);
    return v;
  }();
  return specs;
}

const char* algorithm_name(Algorithm a) { return kAlgorithms[static_cast<int>(a)]; }
const char* failure_law_name(FailureLaw f) { return kLaws[static_cast<int>(f)]; }

double get_param(const Params& p, const std::string& name) {
  const Entry* e = find(name);
  if (!e) throw std::invalid_argument("unknown simulator parameter " + name);
  switch (e->kind) {
    case Kind::real: return p.*(e->real);
    case Kind::integer: return p.*(e->integer);
    case Kind::boolean: return p.*(e->boolean) ? 1 : 0;
    case Kind::algorithm: return static_cast<int>(p.algorithm);
    case Kind::failure_law: return static_cast<int>(p.failure_law);
    case Kind::seed: return static_cast<double>(p.seed);
  }
  return 0;
}

std::string param_text(const Params& p, const std::string& name) {
  const Entry* e = find(name);
  if (!e) throw std::invalid_argument("unknown simulator parameter " + name);
  switch (e->kind) {
    case Kind::boolean: return p.*(e->boolean) ? "true" : "false";
    case Kind::algorithm: return algorithm_name(p.algorithm);
    case Kind::failure_law: return failure_law_name(p.failure_law);
    case Kind::seed: return std::to_string(p.seed);
    case Kind::integer: return std::to_string(p.*(e->integer));
    case Kind::real: return number_text(p.*(e->real));
  }
  return "";
}

std::string set_param(Params& p, const std::string& name, const std::string& value) {
  const Entry* e = find(name);
  if (!e) return "unknown parameter '" + name + "' (cohort sim params lists them)";
  const std::string what = name + " = '" + value + "'";
  if (e->kind == Kind::boolean) {
    if (value == "true" || value == "1" || value == "on") p.*(e->boolean) = true;
    else if (value == "false" || value == "0" || value == "off") p.*(e->boolean) = false;
    else return what + ": not true or false";
    return "";
  }
  if (e->kind == Kind::algorithm || e->kind == Kind::failure_law) {
    const auto* names = e->kind == Kind::algorithm ? kAlgorithms : kLaws;
    const int n = e->kind == Kind::algorithm ? 5 : 2;
    for (int i = 0; i < n; ++i) {
      if (value == names[i]) {
        if (e->kind == Kind::algorithm) p.algorithm = static_cast<Algorithm>(i);
        else p.failure_law = static_cast<FailureLaw>(i);
        return "";
      }
    }
    return what + ": not one of " + e->spec.choices;
  }
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size()) return what + ": not a number";
  if (!std::isfinite(v)) return what + ": not a finite number";
  if (v < e->spec.min || v > e->spec.max) {
    return what + ": out of range [" + number_text(e->spec.min) + ", " + number_text(e->spec.max) + "]";
  }
  if (e->kind == Kind::integer || e->kind == Kind::seed) {
    if (v != std::floor(v)) return what + ": not a whole number";
    if (e->kind == Kind::seed) p.seed = static_cast<unsigned long long>(v);
    else p.*(e->integer) = static_cast<int>(v);
    return "";
  }
  p.*(e->real) = v;
  return "";
}

std::vector<std::string> validate(const Params& p) {
  std::vector<std::string> errors;
  for (const auto& e : entries()) {
    if (e.kind != Kind::real && e.kind != Kind::integer) continue;
    const double v = get_param(p, e.spec.name);
    if (!std::isfinite(v) || v < e.spec.min || v > e.spec.max) {
      errors.push_back(std::string(e.spec.name) + " is " + number_text(v) + ": must be within [" +
                       number_text(e.spec.min) + ", " + number_text(e.spec.max) + "] (" + e.spec.help + ")");
    }
  }
  const double compute = p.data_s + p.forward_s + p.backward_s + p.optimizer_s;
  const bool from_flops = p.flops_per_sample > 0;
  if (from_flops && p.device_flops <= 0) errors.push_back("flops_per_sample needs device_flops > 0");
  if (!from_flops && compute <= 0) errors.push_back("the step takes no time: give forward_s/backward_s or flops_per_sample with device_flops");
  const double world = static_cast<double>(p.nodes) * p.workers_per_node;
  if (world > 1e7) errors.push_back("nodes x workers_per_node is " + number_text(world) + ": at most 10,000,000 workers");
  if (p.slow_workers > world) errors.push_back("slow_workers (" + std::to_string(p.slow_workers) + ") is more than the workers (" + number_text(world) + ")");
  if (p.elastic && p.min_nodes > p.nodes) errors.push_back("min_nodes (" + std::to_string(p.min_nodes) + ") is more than nodes (" + std::to_string(p.nodes) + ")");
  if (p.algorithm == Algorithm::shm && p.nodes > 1) errors.push_back("algorithm shm works inside one node only (nodes is " + std::to_string(p.nodes) + ")");
  if (p.node_mtbf_h > 0 && p.node_mtbf_h < 1e-4) errors.push_back("node_mtbf_h is below 0.36 s: give 0 for no failures");
  return errors;
}

}  // namespace cohort::sim
