// The agent: a job on this node, round after round. See agent.h and round.h.
//
//   rendezvous (round 0) → for each round: start WorkerGroup → supervise → outcome →
//   tell the other nodes → stop the workers → restart decision → next round's rendezvous
//
// Node 0's agent (or the only one) makes the restart decision (coordinator.h), so every node
// runs the same round numbers. Hangs are detected in supervise() (a hung worker is a worker
// failure) and their flight records collected before the workers are stopped (flight_dumps.h).
// Elastic membership lives in the coordinators (elastic/coordinators.h): each round's Assignment
// may bring another world size, node rank and store, which local_places() hands to the workers.
// Monitoring (job_monitor.h): the leading agent's hub hears of every round, failure, restart and
// the end; the workers' metrics and events reach it through supervise().
#include "launcher/agent.h"

#include <signal.h>
#include <string.h>  // sigabbrev_np
#include <sys/prctl.h>  // PR_SET_CHILD_SUBREAPER

#include <functional>
#include <iostream>

#include "cohort/error.h"
#include "launcher/failure_history.h"
#include "launcher/watch/flight_dumps.h"
#include "runtime/host/blas_core.h"
#include "launcher/watch/job_monitor.h"
#include "launcher/io/job_token.h"
#include "launcher/static/rendezvous.h"
#include "launcher/io/signal_pipe.h"
#include "launcher/workers/snapshot_memory.h"
#include "launcher/workers/standby.h"
#include "launcher/recovery/repair.h"
#include "launcher/recovery/store_host.h"
#include "launcher/supervisor.h"
#include "launcher/watch/watch.h"
#include "launcher/workers/worker_group.h"

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

std::string interrupt_summary(const RunOptions& o, int sig) {
  return "cohort run: job stopped: node " + std::to_string(o.node_rank) + "'s cohort run received " +
         signal_name(sig) + "\n";
}

// A static job on one machine meets in a store file in the agent's private (0700) run directory,
// a new one each round: no TCP port is opened, and no one else can read or set the job's keys
// (docs/security.md). Jobs of several nodes, and elastic ones (a node may join later), keep the
// TCPStore on the master address.
std::string store_file(const RunOptions& o, const Assignment& a, const Watch& watch) {
  if (!watch.link || o.nnodes != 1 || !o.rdzv_endpoint.empty()) return "";
  return watch.link->dir() + "/store-" + std::to_string(a.round);
}

std::vector<WorkerPlace> local_places(const RunOptions& o, const Assignment& a, const Watch& watch) {
  std::vector<WorkerPlace> places;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerPlace p;
    p.job.rank = a.rank_base + local;
    p.job.world_size = a.world_size;
    p.job.local_rank = local;
    p.job.local_world_size = o.nproc_per_node;
    p.job.node_rank = a.node_rank;  // an elastic job's nodes and store come from its rendezvous
    p.nnodes = a.nnodes;
    // The store's port stays the same in every round: the coordinators' barrier (next_round) lets
    // no worker of a round start while one of the previous round still runs on any node, and
    // c10d's TCPStore binds with SO_REUSEADDR, so connections of the last round in TIME_WAIT do
    // not block it. One port is also what a firewall between machines lets through.
    p.job.master_addr = a.master_addr;
    p.job.master_port = a.master_port;
    p.job.restart_count = a.round;
    p.max_restarts = o.max_restarts;
    p.threads = o.threads_per_proc;
    p.job.store_file = store_file(o, a, watch);
    p.job.store_hosted = agent_hosts_store(o);
    places.push_back(p);
  }
  return places;
}

// The end of a failed job: the history of earlier rounds' failures (when restarts were allowed),
// then the summary of what ended it.
void print_end(const RunOptions& o, const std::vector<RoundFailure>& history, int restarts, const std::string& summary) {
  if (o.max_restarts > 0 && !history.empty()) std::cerr << failure_history(history, restarts, o.max_restarts);
  std::cerr << summary << std::flush;
}

}  // namespace

namespace {
int run_rounds(RunOptions& o, RendezvousResult& rdzv, SignalPipe& signals, JobMonitor& monitor,
               const std::vector<std::string>& blas_env);
}  // namespace

int run_job(RunOptions o) {
  try {
    finalize_options(o);
  } catch (const std::exception& e) {
    print_error(e);
    return 2;
  }
  // OpenBLAS's own kernels for this CPU when the workers' OpenBLAS would not know it (blas_core.h).
  // Asked now, while the agent has no other thread: the question sets a variable for a moment.
  std::vector<std::string> blas_env;
  if (const auto core = detail::openblas_core_for_workers()) {
    blas_env.push_back("OPENBLAS_CORETYPE=" + *core);
    if (o.verbose)
      std::cerr << "cohort run: OpenBLAS does not know this CPU; the workers get OPENBLAS_CORETYPE=" << *core
                << " (set OPENBLAS_CORETYPE to choose yourself)" << std::endl;
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
  } catch (const JobFinished& e) {  // an elastic spare: the job ended well without it
    std::cerr << e.what() << std::flush;
    return 0;
  } catch (const JobStopped& e) {  // an elastic spare: the job ended badly without it
    std::cerr << e.what() << std::flush;
    return 1;
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }
  // Node 0 (the only node, or the elastic rendezvous host) leads: the hub and the dashboard are its.
  std::unique_ptr<JobMonitor> monitor;
  try {
    monitor = rdzv.assignment.node_rank == 0 ? JobMonitor::lead(o, *rdzv.coordinator, rdzv.assignment)
                                             : JobMonitor::follow(*rdzv.coordinator);
  } catch (const std::exception& e) {
    print_error(e);
    std::string why = e.what();
    if (why.rfind("cohort: ", 0) == 0) why.erase(0, 8);
    rdzv.coordinator->abort("cohort run: job stopped: node " + std::to_string(o.node_rank) +
                            " could not start the dashboard: " + why + "\n");
    return 2;
  }
  const int code = run_rounds(o, rdzv, signals, *monitor, blas_env);
  monitor->finished(code);
  return code;
}

namespace {

int run_rounds(RunOptions& o, RendezvousResult& rdzv, SignalPipe& signals, JobMonitor& monitor,
               const std::vector<std::string>& blas_env) {
  Coordinator& coordinator = *rdzv.coordinator;
  Assignment assignment = rdzv.assignment;
  std::vector<RoundFailure> history;  // one worker failure per failed round, oldest first
  const Watch watch = open_watch(o);  // the worker link (heartbeats, hangs), for every round
  const SnapshotMemory snapshot_memory;  // for the Checkpointer's in-memory snapshots, across rounds
  std::vector<std::string> worker_env = watch.worker_variables();
  for (const auto& v : snapshot_memory.worker_variables()) worker_env.push_back(v);
  if (!o.on_nan.empty()) worker_env.push_back("COHORT_ON_NAN=" + o.on_nan);
  worker_env.push_back("COHORT_JOB_KEY=" + worker_job_key(o));  // signs their checkpoint commit parts
  worker_env.insert(worker_env.end(), blas_env.begin(), blas_env.end());
  // Warm spares (standby.h) are released through the worker link: without one there are none.
  const bool warm_spares = o.warm_spares && watch.link != nullptr;
  if (o.warm_spares && !warm_spares) std::cerr << "cohort run: warning: no worker link, so no warm spares\n";
  StandbyWorkers standby;
  // --keep-survivors: a released spare forks the next one, which must become our child to be
  // reaped and stopped like the others: orphans of our descendants come to us (standby.h).
  if (warm_spares && o.keep_survivors && o.fork_spares && ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
    standby.enable_forking(watch.link.get());
  StoreHost store_host;  // node 0, --keep-survivors on several nodes: the workers' store (store_host.h)
  int repairs = 0;  // workers replaced while the others kept running (--keep-survivors), all rounds

  for (;;) {
    const int round = assignment.round;
    o.node_rank = assignment.node_rank;  // an elastic job's node ranks change between rounds; messages name this one
    monitor.round_started(assignment);
    // 1. Start this node's workers for the round: the warm spares when they were started for
    //    exactly these places (standby.h), else new processes.
    WorkerGroup group;
    group.fork_through(&standby);  // a replacement's "go" may ask it to fork the next spare (standby.h)
    const std::vector<WorkerPlace> places = local_places(o, assignment, watch);
    bool warm_start = false;
    try {
      if (assignment.node_rank == 0 && agent_hosts_store(o))
        store_host.start(assignment.master_addr, assignment.master_port, o.rdzv_timeout_s);
      // Reading the link learns the spares' addresses; what else is queued is the last round's.
      if (!standby.empty()) watch.link->receive();
      if (!standby.empty() && standby.ready_for(places, *watch.link)) {
        group.adopt(standby.take(), o.log_dir, static_cast<size_t>(o.tail_lines));
        group.release_standby(*watch.link);
        warm_start = true;
      } else {
        standby.discard();
        group.start(places, o.command, o.log_dir, static_cast<size_t>(o.tail_lines), worker_env);
      }
    } catch (const std::exception& e) {
      print_error(e);
      coordinator.abort("cohort run: job failed: node " + std::to_string(o.node_rank) +
                        " could not start its workers: " + e.what() + "\n");
      group.stop(o.stop_grace_s, signals);
      return 2;
    }
    if (o.verbose) {
      std::cerr << "cohort run: " << (round > 0 ? "round " + std::to_string(round) + ": " : "") << "node "
                << o.node_rank << (warm_start ? " released its warm spares as" : " started") << " ranks "
                << assignment.rank_base << ".." << assignment.rank_base + o.nproc_per_node - 1 << " of "
                << assignment.world_size << "; store at " << assignment.master_addr << ":" << assignment.master_port
                << std::endl;
    }

    // 2. Supervise until the round ends.
    // The next round's warm spares start once this round trains, while restarts are left; with
    // --keep-survivors they are spares for this round's own places, each to replace one worker.
    std::function<void()> start_spares;
    int restarts = assignment.restarts;  // the job's restarts and repairs, as node 0 counts them
    if (warm_spares && o.keep_survivors) {
      start_spares = [&] {
        if (restarts >= o.max_restarts) return;
        try {
          standby.top_up(places, o.command, worker_env);
        } catch (const std::exception& e) {  // a replacement will be a new process instead
          std::cerr << "cohort run: warning: could not start warm spares: " << e.what() << std::endl;
        }
      };
    } else if (warm_spares && assignment.restarts < o.max_restarts) {
      start_spares = [&] {
        Assignment next = assignment;
        next.round += 1;
        try {
          standby.start(local_places(o, next, watch), o.command, worker_env);
        } catch (const std::exception& e) {  // the restart will start new processes instead
          std::cerr << "cohort run: warning: could not start warm spares: " << e.what() << std::endl;
          standby.discard();
        }
      };
    }
    Outcome outcome;
    for (;;) {
      outcome = supervise(group, coordinator, signals, round, &watch, &monitor, start_spares);
      // --keep-survivors (repair.h): another node replaces a worker and ours rejoin around it, or
      // one of ours failed and is replaced alone once node 0 grants it.
      if (outcome.kind == Outcome::peer_repaired) {
        tell_rejoin(group, watch, outcome.repair->generation);
        restarts = outcome.repair->restarts;
        ++repairs;
        if (o.verbose || monitor.leading()) std::cerr << outcome.summary << std::flush;
        monitor.round_failed(outcome);
        monitor.replaced(outcome.summary, outcome.repair->rank, outcome.repair->generation, restarts);
        continue;
      }
      const auto lost = repairable(o, outcome, group, watch, restarts);
      if (!lost) break;
      std::optional<RepairGrant> grant;
      try {
        grant = coordinator.request_repair(outcome, signals);
      } catch (const Interrupted& e) {
        outcome = {Outcome::interrupted, "", e.signal, std::nullopt, std::nullopt};
        break;
      }
      if (!grant) break;
      restarts = grant->restarts;
      // A hang: the survivors' flight records (what they wait in) before the hung worker goes.
      if (const int sig = dump_flight_records_in_place(outcome, group, watch, round, grant->generation, signals)) {
        outcome = {Outcome::interrupted, "", sig, std::nullopt, std::nullopt};
        break;
      }
      const auto repair = replace_worker(o, outcome, *lost, *grant, group, watch, standby, worker_env, signals);
      if (!repair) break;
      monitor.round_failed(outcome);
      std::cerr << repair->notice << std::flush;
      ++repairs;
      monitor.replaced(repair->notice, grant->rank, grant->generation, restarts, repair->spare);
    }
    if (outcome.kind != Outcome::succeeded) monitor.round_failed(outcome);
    if (outcome.kind == Outcome::succeeded) {
      if (round > 0 || repairs > 0 || o.verbose) std::cerr << success_note(restarts) << std::flush;
      return 0;
    }
    if (outcome.kind == Outcome::interrupted) outcome.summary = interrupt_summary(o, outcome.signal);

    // 3. Tell the other nodes first (they stop in parallel with us), stop ours, learn the decision.
    //    An interrupt — the round's outcome, or one that arrives meanwhile — is never restarted.
    coordinator.round_over(outcome);
    // A hang: every worker writes its flight record before it is stopped (flight_dumps.h).
    int interrupt = dump_flight_records(outcome, group, watch, round, o.stop_grace_s, signals);
    const int late_interrupt = group.stop(o.stop_grace_s, signals);
    if (interrupt == 0) interrupt = late_interrupt;
    // No worker of the next round may meet in this round's store (its keys are this round's).
    store_host.stop();
    if (outcome.kind == Outcome::interrupted) {
      print_end(o, history, restarts, outcome.summary);
      return 128 + outcome.signal;
    }
    RoundEnd end;
    try {
      if (interrupt == 0) signals.throw_if_interrupted();  // one that came after the workers were gone
      if (interrupt == 0) end = coordinator.decision(signals);
    } catch (const Interrupted& e) {
      interrupt = e.signal;
    }
    if (interrupt != 0) {
      const std::string summary = interrupt_summary(o, interrupt);
      coordinator.abort(summary);
      if (outcome.failure) history.push_back(*outcome.failure);
      print_end(o, history, restarts, summary);
      return 128 + interrupt;
    }
    if (end.failure) history.push_back(*end.failure);
    if (!end.restart) {
      print_end(o, history, restarts, end.summary);
      return 1;
    }

    // 4. The next round: every node agrees on its number before any worker starts.
    //    An elastic job's coordinator words the notice itself (a membership change is no restart).
    const std::string notice = !end.notice.empty() ? end.notice
                               : end.failure       ? restart_notice(*end.failure, restarts + 1, o.max_restarts)
                                                   : "cohort run: round " + std::to_string(round) + " failed; restarting the job\n";
    std::cerr << notice << std::flush;
    monitor.restarting(notice, restarts + (end.failure ? 1 : 0));
    try {
      assignment = coordinator.next_round(signals);
    } catch (const Interrupted& e) {
      const std::string summary = interrupt_summary(o, e.signal);
      coordinator.abort(summary);
      print_end(o, history, restarts, summary);
      return 128 + e.signal;
    } catch (const JobStopped& e) {
      print_end(o, history, restarts, e.what());
      return 1;
    }
  }
}

}  // namespace

}  // namespace cohort::launcher
