// launcher/supervisor.h — the loop that watches one round of a job until it ends one way or another.
//
// One poll() over the signal pipe, the workers' output pipes and the coordination links; it relays
// output, reaps workers and turns what happens into one Outcome (round.h). It decides nothing about
// what to do next: the agent (agent.cpp) stops the workers and asks the coordinator whether the job
// restarts. The workers' heartbeats arrive on the worker link (watch.h) in the same poll; a worker
// the hang rule (hang_detector.h, --hang-timeout) finds hung becomes a worker_failed Outcome like a
// crash, its `how` saying so, its summary naming where the flight records go (flight_dumps.h).
// The workers' "metrics" and "event" messages arrive on the same link and go to the JobMonitor
// (job_monitor.h), which also gets a tick every turn (the stall rule).
#pragma once

#include <functional>

#include "launcher/round.h"

namespace cohort::launcher {

class WorkerGroup;
class Coordinator;
class SignalPipe;
struct Watch;
class JobMonitor;

/// Supervises round `round` (stamped on a worker failure) until it ends. `watch` null: exits only.
/// `monitor` null: the workers' metrics and events are dropped. Adopted standby workers are
/// released as soon as the link knows them. `once_training` runs once, when every worker's
/// heartbeat shows training (or 10 s into the round): the agent starts the next round's warm spares
/// then, so that they do not compete with this round's start-up for the cores.
Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals, int round,
                  const Watch* watch = nullptr, JobMonitor* monitor = nullptr,
                  const std::function<void()>& once_training = nullptr);

}  // namespace cohort::launcher
