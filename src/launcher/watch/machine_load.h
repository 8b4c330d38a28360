// launcher/watch/machine_load.h — how busy the leading agent's machine is, from /proc/stat.
//
// Every second the agent logs the machine's busy and steal time in cores
// (hub::Hub::machine_sample). Alone that says little; against the workers' own CPU time (each
// metrics record's cpu_s) it tells how much of the machine other work took while the job ran:
// `cohort sim calibrate` drops the steps of such windows instead of fitting a machine it does not
// model (issue 50). Linux only; elsewhere, or when /proc/stat cannot be read, no samples.
#pragma once

#include <cstdint>
#include <optional>

namespace cohort::launcher {

/// Busy and steal cores of one interval between two reads of /proc/stat's "cpu" line.
struct MachineLoad {
  int cores = 0;             // online CPUs
  double busy_cores = 0;     // user + nice + system + irq + softirq, as cores over the interval
  double steal_cores = 0;    // time the hypervisor gave this VM's CPUs to others, as cores
  double seconds = 0;        // the interval
};

/// The cumulative counters of /proc/stat's first line, in clock ticks.
struct CpuTicks {
  uint64_t busy = 0, steal = 0, total = 0;
};

/// Parses the first ("cpu ") line of /proc/stat's text; nullopt when it is not one.
std::optional<CpuTicks> parse_cpu_line(const char* text);

/// Reads /proc/stat now and returns the load since the previous call that returned a value
/// (nullopt the first time, and when it cannot read).
class MachineLoadSampler {
 public:
  std::optional<MachineLoad> sample();

 private:
  std::optional<CpuTicks> last_;
  double last_s_ = 0;
};

}  // namespace cohort::launcher
