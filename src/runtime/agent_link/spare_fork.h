// runtime/agent_link/spare_fork.h — a standby worker waits in init(); a released one may fork its
// successor first (`cohort run --keep-survivors --warm-spares`).
//
// A spare that replaces a failed worker leaves its place without a spare, and starting a new
// process for it costs what the spare saved: loading libtorch and the program's set-up (its data),
// ~0.7 s of CPU here, taken from the cores the job trains on. But the released spare *is* that
// process, waiting in init() with all of it done. So when the agent's "go" says "fork" (and brings
// the successor's stdout and stderr), the spare forks before it joins, and the child — the same
// program with the same variables, its data in pages shared copy-on-write — waits in init() as
// the next spare. A fork of this process takes milliseconds.
// The agent reaps and kills its spares, so the child must be the agent's child: the spare forks
// twice and the middle process exits at once, which re-parents the child to the agent (a child
// subreaper, PR_SET_CHILD_SUBREAPER). The child then takes the agent's death signal
// (PR_SET_PDEATHSIG), a process group of its own, the descriptors the agent sent, and a link of its
// own (agent_link.h): its heartbeats tell the agent it waits. The spare answers
// {"type":"forked","spare":PID} — or "refused" and why — on its link before it joins.
// A fork copies only the calling thread: a spare running threads besides the link's (a program
// that started its own before init()) is not forked; the agent starts a new process instead.
#pragma once

#include <sys/types.h>

#include <string>

#include "cohort/job_env.h"

namespace cohort::detail {

struct SpareFork {
  pid_t child = -1;     // in the spare: the successor's pid (> 0); in the successor: 0
  std::string refused;  // why there is none (child < 0)
};

/// Forks the successor of this released spare; takes the two descriptors (closed here). Returns
/// twice on success: in the spare, with the child's pid, and in the child, set up, with 0.
SpareFork fork_successor(const JobEnv& env, int stdout_fd, int stderr_fd);

/// COHORT_STANDBY=1 (a warm spare): waits for the agent's "go" — forking a successor when asked, the
/// successor waiting in turn — and returns the generation the "go" named (-1: a round's start).
/// Throws cohort::ConfigError when there is no link to an agent to be released by.
int wait_as_standby(const JobEnv& env);

}  // namespace cohort::detail
