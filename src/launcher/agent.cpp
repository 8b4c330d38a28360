// The agent: one attempt of a job on this node. See agent.h.
// Where restarts will go: after a failure Outcome, instead of returning, stop the group, run the
// rendezvous again with restart_count + 1 and start a fresh WorkerGroup (a loop around the middle).
#include "agent.h"

#include <signal.h>
#include <string.h>  // sigabbrev_np

#include <iostream>

#include "cohort/error.h"
#include "rendezvous.h"
#include "signal_pipe.h"
#include "supervisor.h"
#include "worker_group.h"

namespace cohort::launcher {
namespace {

// cohort::Error messages start with "cohort: "; the launcher says "cohort run: error: ".
void print_error(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("cohort: ", 0) == 0) what.erase(0, 8);
  std::cerr << "cohort run: error: " << what << std::endl;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::vector<WorkerPlace> local_places(const RunOptions& o, const RendezvousResult& r) {
  std::vector<WorkerPlace> places;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerPlace p;
    p.job.rank = r.rank_base + local;
    p.job.world_size = r.world_size;
    p.job.local_rank = local;
    p.job.local_world_size = o.nproc_per_node;
    p.job.node_rank = o.node_rank;
    p.nnodes = o.nnodes;
    p.job.master_addr = o.master_addr;
    p.job.master_port = o.master_port;
    p.job.restart_count = 0;
    p.threads = o.threads_per_proc;
    places.push_back(p);
  }
  return places;
}

}  // namespace

int run_job(RunOptions o) {
  try {
    finalize_options(o);
  } catch (const std::exception& e) {
    print_error(e);
    return 2;
  }
  SignalPipe signals;  // from here on SIGINT/SIGTERM are events, not deaths
  RendezvousResult rdzv;
  try {
    rdzv = rendezvous(o, signals);
  } catch (const Interrupted& e) {
    std::cerr << "cohort run: interrupted by " << signal_name(e.signal) << " while waiting for the other nodes\n";
    return 128 + e.signal;
  } catch (const TimeoutError& e) {
    print_error(e);
    return 3;
  } catch (const ConfigError& e) {
    print_error(e);
    return 2;
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }

  WorkerGroup group;
  try {
    group.start(local_places(o, rdzv), o.command, o.log_dir, static_cast<size_t>(o.tail_lines));
  } catch (const std::exception& e) {
    print_error(e);
    rdzv.coordinator->abort("cohort run: job failed: node " + std::to_string(o.node_rank) +
                            " could not start its workers: " + e.what() + "\n");
    group.stop(o.stop_grace_s, signals);
    return 2;
  }
  if (o.verbose) {
    std::cerr << "cohort run: node " << o.node_rank << " started ranks " << rdzv.rank_base << ".."
              << rdzv.rank_base + o.nproc_per_node - 1 << " of " << rdzv.world_size << "; store at "
              << o.master_addr << ":" << o.master_port << std::endl;
  }

  Outcome outcome = supervise(group, *rdzv.coordinator, signals);
  if (outcome.kind == Outcome::succeeded) return 0;

  std::string summary = outcome.summary;
  if (outcome.kind == Outcome::interrupted) {
    summary = "cohort run: job stopped: node " + std::to_string(o.node_rank) + "'s cohort run received " +
              signal_name(outcome.signal) + "\n";
  }
  rdzv.coordinator->abort(summary);  // tell the other nodes first: they stop in parallel with us
  group.stop(o.stop_grace_s, signals);
  std::cerr << summary << std::flush;
  return outcome.kind == Outcome::interrupted ? 128 + outcome.signal : 1;
}

}  // namespace cohort::launcher
