// sim/runlog/run_load.h — what a run's event log says about load the simulator does not model:
// other work on the machine, and time the hypervisor took (steal).
//
// The leading agent logs its machine's busy and steal cores every second ("machine" lines,
// launcher/watch/machine_load.h); each worker's metrics carry the CPU seconds it used (cpu_s).
// Over a window, busy minus the CPU of the job's ranks on that machine (node 0) is other work. A
// calibration fitted on steps slowed by it predicts a slower machine than the one it runs on
// (issue 50: +171 % after calibration runs that shared the machine with a busy process), so
// calibrate drops the steps of loaded windows, and refuses a run that has too few clean ones.
// Logs without these lines (an older cohort, or no /proc) are taken as they are. No torch.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::sim {

struct LoadWindow {
  double t0 = 0, t1 = 0;          // wall clock, seconds
  double foreign_cores = 0;       // busy cores not the job's (node 0's ranks)
  double steal_cores = 0;
  bool loaded = false;            // foreign + steal at least RunLoad::threshold_cores, in a window inside the steps
};

struct RunLoad {
  bool measured = false;          // the log has machine samples and the workers' cpu_s
  int cores = 0;
  double threshold_cores = 0;
  std::vector<LoadWindow> windows;
  /// Whether [t0, t1] overlaps a loaded window.
  bool loaded(double t0, double t1) const;
  /// The mean foreign and steal cores over the windows that overlap [t0, t1].
  double mean_foreign(double t0, double t1) const;
  double mean_steal(double t0, double t1) const;
};

/// Collects a log's "machine" lines and the job's CPU on that machine (the metrics' t, cpu_s) as
/// summarize_run reads them: node 0's ranks, or every rank where the nodes share one machine
/// (network namespaces: calibrate's --shared-machine).
class RunLoadReader {
 public:
  explicit RunLoadReader(bool nodes_share_machine = false) : all_nodes_(nodes_share_machine) {}
  /// A line of the log; lines of other types are ignored.
  void add(const nlohmann::json& line);
  RunLoad finish() const;

 private:
  struct Sample {
    double t, busy, steal;
    int cores;
  };
  struct Cpu {
    double t0, t1, cpu_s;  // the record's step: [t - step_s, t]
  };
  bool all_nodes_ = false;
  std::vector<Sample> samples_;
  std::vector<Cpu> cpu_;
};

/// Other work at or above this many cores (plus steal) makes a window loaded: a quarter of a core
/// or a tenth of the machine, whichever is more — above what the kernel's own work for the job
/// (loopback traffic, the agent) adds on a quiet machine.
double load_threshold_cores(int cores);

}  // namespace cohort::sim
