// launcher/supervisor.h — the loop that watches one round of a job until it ends one way or another.
//
// One poll() over the signal pipe, the workers' output pipes and the coordination links; it relays
// output, reaps workers and turns what happens into one Outcome (round.h). It decides nothing about
// what to do next: the agent (agent.cpp) stops the workers and asks the coordinator whether the job
// restarts. Periodic work fits the tick: worker heartbeats and hang detection (a worker whose step
// stops advancing for --hang-timeout becomes a worker_failed Outcome) will go there.
#pragma once

#include "round.h"

namespace cohort::launcher {

class WorkerGroup;
class Coordinator;
class SignalPipe;

/// Supervises round `round` (stamped on a worker failure) until it ends.
Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals, int round);

}  // namespace cohort::launcher
