// launcher/workers/spawn.h — starting one worker process.
//
// The worker gets its own process group (so stopping it reaches its children too), dies with the
// launcher (PR_SET_PDEATHSIG=SIGKILL, re-checked against the fork/prctl race), has stdin from
// /dev/null and stdout/stderr on pipes the launcher relays. A failed exec is reported to the
// caller as an exception, not as a worker exiting 127.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cohort::launcher {

struct SpawnedProcess {
  pid_t pid = -1;   // also its process group id
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

/// Forks and execs argv[0] (a path) with exactly `env` as its environment.
/// Throws cohort::ConfigError when the program cannot be executed.
SpawnedProcess spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env);

}  // namespace cohort::launcher
