// Machine facts for the launcher's defaults: cores, GPUs, a free port. See host_info.h.
#include "launcher/config/host_info.h"

#include <arpa/inet.h>   // inet_pton
#include <dirent.h>      // opendir: counting /dev/nvidia<N>
#include <netinet/in.h>  // sockaddr_in
#include <sched.h>       // sched_getaffinity
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cohort/error.h"
#include "launcher/io/socket_util.h"

namespace cohort::launcher {

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int visible_gpu_count() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string s(v);
    if (s.empty() || s == "-1" || s == "none") return 0;
    int n = 1;
    for (char c : s) n += c == ',';
    return n;
  }
  int n = 0;
  if (DIR* dir = opendir("/dev")) {
    while (dirent* e = readdir(dir)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
      bool digits = true;
      for (const char* p = name + 6; *p; ++p) digits = digits && std::isdigit(static_cast<unsigned char>(*p));
      n += digits;
    }
    closedir(dir);
  }
  return n;
}

int pick_free_port(const std::string& addr) {
  int fd = bind_tcp(addr, 0);  // throws ConfigError naming the address
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  close(fd);
  return ntohs(bound.sin_port);
}

}  // namespace cohort::launcher
