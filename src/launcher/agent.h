// launcher/agent.h — `cohort run` from options to exit code: validate, rendezvous, start this node's
// workers, supervise, and on failure or interrupt stop everything and explain why.
//
// Exit codes: 0 the job succeeded; 1 a worker failed (here or on another node) or a node was lost;
// 2 bad input (one line on stderr); 3 the rendezvous timed out; 128+N interrupted by signal N.
#pragma once

#include "launcher/config/options.h"

namespace cohort::launcher {

int run_job(RunOptions options);

}  // namespace cohort::launcher
