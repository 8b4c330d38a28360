// launcher/workers/spawn.h — starting one worker process; reaping orphans the workers leave.
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

// Orphans. As a child subreaper (--keep-survivors --warm-spares: agent.cpp), the agent inherits
// every process a worker started and left behind when it died; once those end they stay zombies
// until someone waits for them, and a long job with many restarts would collect them. waitpid(-1)
// cannot be the answer: it would take the exit status of a worker, spare or store host that other
// code waits for by pid (worker_group.cpp, standby.cpp, store_host.cpp). So the children some part
// of the agent waits for are counted here as they are made (spawn_worker, a forked spare once it is
// named), and reap_orphans() waits only for the dead children that are not among them.

/// Counts `pid`, a child of this process, as one some part of the agent waits for by pid.
void own_child(pid_t pid);
/// Reaps this process's dead children that nobody owns (above) and returns how many; cheap when
/// no child is dead (one waitid() that reaps nothing), else one pass over /proc.
int reap_orphans();

}  // namespace cohort::launcher
