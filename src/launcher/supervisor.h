// launcher/supervisor.h — the loop that watches a running job until it ends one way or another.
//
// One poll() over the signal pipe, the workers' output pipes and the coordination links; it relays
// output, reaps workers and turns what happens into one Outcome. It decides nothing about what to
// do next: the agent (agent.h) stops workers, prints and exits — and a later issue's restart policy
// will instead start a new round there. Periodic work (heartbeats, hang detection) fits the tick.
#pragma once

#include <string>

namespace cohort::launcher {

class WorkerGroup;
class Coordinator;
class SignalPipe;

struct Outcome {
  enum Kind { succeeded, worker_failed, peer_failed, peer_lost, interrupted } kind = succeeded;
  std::string summary;  // the failure summary (worker_failed, peer_failed, peer_lost)
  int signal = 0;       // interrupted: the signal received
};

Outcome supervise(WorkerGroup& workers, Coordinator& coordinator, SignalPipe& signals);

}  // namespace cohort::launcher
