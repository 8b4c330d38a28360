// Background work at the lowest CPU priority. See cpu_priority.h.
#include "runtime/host/cpu_priority.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cohort::detail {
namespace {

constexpr int kCapSysNice = 23;  // linux/capability.h

bool has_cap_sys_nice() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t caps = 0;
    std::istringstream(line.substr(7)) >> std::hex >> caps;
    return (caps >> kCapSysNice) & 1u;
  }
  return false;
}

}  // namespace

int this_thread_nice() {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  return errno == 0 ? nice : 0;
}

void lower_this_thread_priority() {
  if (this_thread_nice() < kBackgroundNice) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kBackgroundNice);
}

bool can_return_to_nice(int nice) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NICE, &limit) == 0 &&
      (limit.rlim_cur == RLIM_INFINITY || static_cast<int64_t>(limit.rlim_cur) >= 20 - nice))
    return true;
  return has_cap_sys_nice();
}

std::string set_process_nice(int nice) {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return std::string("cannot list this process's threads: ") + std::strerror(errno);
  std::string problem;
  while (dirent* e = ::readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    const auto tid = static_cast<id_t>(std::strtol(e->d_name, nullptr, 10));
    // A thread that ended since the listing is no problem (ESRCH).
    if (::setpriority(PRIO_PROCESS, tid, nice) != 0 && errno != ESRCH && problem.empty())
      problem = "cannot set thread " + std::to_string(tid) + " to nice " + std::to_string(nice) + ": " + std::strerror(errno);
  }
  ::closedir(tasks);
  return problem;
}

}  // namespace cohort::detail
