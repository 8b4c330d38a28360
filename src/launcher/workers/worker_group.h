// launcher/workers/worker_group.h — the workers of one node for one round: start them, relay their output,
// notice when they end, stop them.
//
// Owns the processes and their pipes; knows nothing of other nodes or of policy (what a failure
// means is the supervisor's business). Every round of a job has a fresh WorkerGroup.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "launcher/failure_summary.h"
#include "launcher/workers/output_relay.h"
#include "launcher/workers/standby.h"
#include "launcher/workers/worker_env.h"

namespace cohort::launcher {

class SignalPipe;
class WorkerLink;

struct Worker {
  WorkerPlace place;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends; -1 once at end-of-file
  std::unique_ptr<OutputRelay> relay;
  bool exited = false;
  int wait_status = 0;
  bool rejoinable = false;  // its heartbeats say it trains in cohort::keep_running()
  bool replacement = false; // it replaced a failed worker of this round (repair.h)
};

class WorkerGroup {
 public:
  WorkerGroup() = default;
  ~WorkerGroup();  // kills and reaps whatever still runs (a safety net; stop() is the normal path)
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// Spawns one worker per place. log_dir empty: no log files. `extra_env` (NAME=VALUE) goes to
  /// every worker after its place's variables (the worker link's). Throws cohort::ConfigError.
  void start(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
             const std::string& log_dir, size_t tail_lines, const std::vector<std::string>& extra_env = {});

  /// Takes over workers started ahead of time (standby.h) as this round's workers. They wait in
  /// cohort::init() until release_standby() reaches them.
  void adopt(std::vector<StandbyProcess> standby, const std::string& log_dir, size_t tail_lines);
  /// Sends "go" to every adopted worker not yet released whose address the link knows (it learns
  /// it from the worker's first heartbeat, sent while standing by); the others on a later call.
  /// `generation` > 0: the "go" names it (a spare that replaces one worker, repair.h); one put in
  /// place with `fork` gets it from fork_through()'s spares, asking it to fork the next spare.
  void release_standby(WorkerLink& link, int generation = 0);
  /// Where release_standby() sends a "go" that forks (StandbyWorkers::release_forking()).
  void fork_through(StandbyWorkers* spares) { forker_ = spares; }
  bool releasing() const { return !unreleased_.empty(); }

  /// Adds the open output pipes to `fds` (events POLLIN).
  void add_pollfds(std::vector<pollfd>& fds) const;
  /// Relays output from the pipes poll() marked ready (entries not ours are ignored).
  void pump(const std::vector<pollfd>& ready);
  /// Reads what is left in a worker's pipes without waiting, and finishes its last line.
  void drain(Worker& w);

  /// Collects ended workers (waitpid, no waiting); returns the indices of those that ended now.
  std::vector<size_t> reap();

  bool all_exited() const;
  bool all_succeeded() const;
  std::vector<Worker>& workers() { return workers_; }
  /// The worker with this pid that has not exited yet, or nullptr.
  Worker* running(pid_t pid);

  WorkerFailure failure_of(const Worker& w) const;

  /// Puts `process` (started for workers()[index]'s place, or a standby worker for it, then
  /// `standby` true: released by release_standby, forking the next spare when `fork`) in the place
  /// of that worker, which has exited: its output goes on to the same log and tail.
  void replace(size_t index, const SpawnedProcess& process, bool standby, bool fork = false);

  /// Stops every worker still running: SIGTERM to each worker's process group, output relayed
  /// while waiting up to grace_s, then SIGKILL; a second SIGINT/SIGTERM on `signals` skips the
  /// wait. Returns when every worker is reaped, having killed what was left in their groups.
  /// Returns the first SIGINT/SIGTERM/SIGHUP seen meanwhile (0: none), so that an interrupt that
  /// arrives while a failed round is being stopped still prevents the restart.
  int stop(double grace_s, SignalPipe& signals);
  /// The same for the workers with these indices only (the others keep running).
  int stop(const std::vector<size_t>& which, double grace_s, SignalPipe& signals);

 private:
  void add(const WorkerPlace& place, const SpawnedProcess& process, const std::string& log_dir, size_t tail_lines);
  void kill_groups(const std::vector<size_t>& which, int sig);
  bool all_exited(const std::vector<size_t>& which) const;
  std::vector<Worker> workers_;
  struct Unreleased {
    pid_t pid = -1;
    bool fork = false;  // its "go" asks it to fork the next spare (replace())
  };
  std::vector<Unreleased> unreleased_;  // adopted standby workers still waiting for "go"
  StandbyWorkers* forker_ = nullptr;
  int release_generation_ = 0;     // what their "go" names (a repair's generation; 0: none)
};

}  // namespace cohort::launcher
