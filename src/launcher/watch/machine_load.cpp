// The machine's busy and steal time from /proc/stat. See machine_load.h.
#include "launcher/watch/machine_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace cohort::launcher {

std::optional<CpuTicks> parse_cpu_line(const char* text) {
  if (std::strncmp(text, "cpu ", 4) != 0) return std::nullopt;
  // user nice system idle iowait irq softirq steal (guest time is inside user already)
  unsigned long long v[8] = {};
  if (std::sscanf(text + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                  &v[7]) < 4) {
    return std::nullopt;
  }
  CpuTicks t;
  t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
  t.steal = v[7];
  for (unsigned long long x : v) t.total += x;
  return t;
}

std::optional<MachineLoad> MachineLoadSampler::sample() {
  char buf[512];
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  const auto ticks = parse_cpu_line(buf);
  if (!ticks) return std::nullopt;
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const auto previous = last_;
  const double previous_s = last_s_;
  last_ = ticks;
  last_s_ = now;
  if (!previous || ticks->total <= previous->total || now <= previous_s) return std::nullopt;
  MachineLoad load;
  load.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  load.seconds = now - previous_s;
  // Ticks as fractions of all CPUs' time over the interval, times the cores: no USER_HZ needed.
  const double total = static_cast<double>(ticks->total - previous->total);
  load.busy_cores = static_cast<double>(ticks->busy - previous->busy) / total * load.cores;
  load.steal_cores = static_cast<double>(ticks->steal - previous->steal) / total * load.cores;
  return load;
}

}  // namespace cohort::launcher
