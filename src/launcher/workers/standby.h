// launcher/workers/standby.h — warm spares (`cohort run --warm-spares`): the next round's workers, started
// while the current round trains, each waiting in cohort::init() until the agent releases it.
//
// A restart otherwise waits for new processes to load libtorch (~0.4 s of CPU each here) and for the
// program's own set-up (its data) before the first step. A standby worker has done all of that
// already: it was started with exactly the variables the next round gives (worker_env.h, restart
// count included) plus COHORT_STANDBY=1, and init() blocks until the agent's "go" arrives on the
// worker link (src/runtime/agent_link/agent_link.h). So a program that reads RANK or COHORT_RESTART_COUNT
// before init() sees the right values; what it must not do before init() is depend on files the
// training writes (checkpoints): those are read after init(), by the Checkpointer.
// The agent adopts the standby workers only when the next round's places are exactly the ones they
// were started for (an elastic round may bring another world size) and every one of them is
// waiting in init() (its heartbeat arrived); otherwise it discards them and starts fresh workers.
// So a spare still loading when a failure comes costs nothing but the fresh start, and a program
// that does not call cohort::init() — it would run ahead instead of waiting — is never adopted
// (a warning says so once such a spare exits on its own). Their output pipes are not read until they are adopted (the kernel buffers
// what they print meanwhile). They die with the agent (PR_SET_PDEATHSIG, spawn.h).
// --keep-survivors: a spare released to replace one worker is asked to fork its successor before
// it joins (release_forking(); the worker's side is src/runtime/agent_link/spare_fork.h), which
// costs milliseconds where a new process costs its whole start-up on the cores the job trains on.
// A replacement for which no spare waits is started as a standby (start_one()) and released as
// soon as it stands by, to fork in the same way (WorkerGroup::release_standby()).
// The successor becomes this place's spare once the released one names it; one that refused (a
// program with threads of its own before init()) or did not answer within kForkAnswerTimeout is
// replaced by a new process at the next top_up(), with a warning saying why.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/workers/spawn.h"
#include "launcher/workers/worker_env.h"

namespace cohort::launcher {

class WorkerLink;

struct StandbyProcess {
  WorkerPlace place;
  SpawnedProcess process;
  bool forked = false;  // forked by the spare released before it (release_forking())
};

class StandbyWorkers {
 public:
  StandbyWorkers() = default;
  ~StandbyWorkers();  // discards what was not taken
  StandbyWorkers(const StandbyWorkers&) = delete;
  StandbyWorkers& operator=(const StandbyWorkers&) = delete;

  /// Starts one standby worker per place (after discarding earlier ones). Throws cohort::ConfigError.
  void start(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
             const std::vector<std::string>& extra_env);
  bool empty() const { return standby_.empty(); }
  /// Whether the standby workers were started for exactly these places and all wait in init():
  /// running, and known to the link (call link.receive() first).
  bool ready_for(const std::vector<WorkerPlace>& places, const WorkerLink& link);
  /// Hands the standby workers over (to WorkerGroup::adopt); afterwards this is empty.
  std::vector<StandbyProcess> take();
  /// --keep-survivors: spares for this round's own places, one replacement each (repair.h).
  /// Starts one for each place that has none (keeping those that wait already, or are being
  /// forked); stops those waiting for other places (an earlier round's).
  void top_up(const std::vector<WorkerPlace>& places, const std::vector<std::string>& command,
              const std::vector<std::string>& extra_env);
  /// Hands over the spare started for `place` when it waits in init() — with forking on, also one
  /// still starting; std::nullopt otherwise (none, still starting, or it died: then it is discarded).
  std::optional<StandbyProcess> take_for(const WorkerPlace& place, const WorkerLink& link);
  /// Kills and reaps the standby workers.
  void discard();

  /// Lets release_forking() ask spares to fork their successors; this process must be a child
  /// subreaper (PR_SET_CHILD_SUBREAPER) for them to be its children. Answers arrive on `link`.
  void enable_forking(WorkerLink* link) { fork_link_ = link; }
  bool forking() const { return fork_link_ != nullptr; }
  /// Starts one standby worker for `place` (COHORT_STANDBY=1), not kept here: with forking on, a
  /// replacement for which no spare waits starts so, to fork the next spare once released.
  static SpawnedProcess start_one(const WorkerPlace& place, const std::vector<std::string>& command,
                                  const std::vector<std::string>& extra_env);
  /// Sends "go" (naming `generation`) with "fork" to the spare `pid` just taken for `place`, with
  /// the successor's stdout and stderr; false when forking is off or the request could not be sent
  /// (WorkerGroup::release_standby() asks again on its next call).
  bool release_forking(const WorkerPlace& place, pid_t pid, int generation);

  static constexpr std::chrono::seconds kForkAnswerTimeout{5};

 private:
  struct PendingFork {
    WorkerPlace place;
    pid_t released = -1;  // the spare asked to fork
    int stdout_fd = -1;   // the successor's pipes, read ends
    int stderr_fd = -1;
    std::chrono::steady_clock::time_point asked;
  };
  /// Turns the answers that arrived into spares (or warnings); drops forks unanswered too long.
  void settle_forks();
  /// A spare waits for `place`, or (or_forking) one is being forked for it.
  bool covered(const WorkerPlace& place, bool or_forking) const;
  void kill_and_reap(SpawnedProcess& p);

  std::vector<StandbyProcess> standby_;
  std::vector<PendingFork> pending_;
  std::vector<pid_t> abandoned_;  // released spares whose successor, once named, is killed (discard())
  WorkerLink* fork_link_ = nullptr;
  bool warned_ = false;  // a spare exited on its own: said once
};

}  // namespace cohort::launcher
