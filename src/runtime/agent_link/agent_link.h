// runtime/agent_link/agent_link.h — the worker's line to its `cohort run` agent: heartbeats out, requests in.
//
// The agent names a Unix datagram socket in COHORT_AGENT_SOCKET, inside a private run directory
// (mode 0700: only this user can send to it or to us). start_agent_link(), called by init(),
// binds this process's own socket next to it (w<pid>.sock, so that the agent can answer) and
// starts one thread, which
//   * every COHORT_HEARTBEAT_MS (default 1000) sends a heartbeat: rank, pid, step counters and
//     completed collectives (progress.h), and the collective this rank waits in, if any;
//   * serves the agent's requests: {"type":"dump","path":P,"reason":R} writes the flight record
//     (flight_recorder.h) to P (through a temporary file and a rename) and answers "dumped";
//     {"type":"go"} releases a standby worker (wait_until_released(), `cohort run --warm-spares`),
//     with "generation" when it replaces one worker of a running round (--keep-survivors), and with
//     "fork":true and two file descriptors (SCM_RIGHTS: the next spare's stdout and stderr) when the
//     agent wants the released spare to fork its successor first (spare_fork.h);
//     {"type":"rejoin","generation":G} tells a survivor of a peer's failure which generation of
//     process groups to re-form (wait_for_rejoin(), keep_running.h).
// One JSON object per datagram. Sends never block: when the agent is slow (its queue full) or gone,
// the message is dropped — training never waits on its agent. Nothing runs in a signal handler;
// a rank stopped by SIGSTOP dumps once the agent has continued it (docs/fault-tolerance.md).
// Without COHORT_AGENT_SOCKET (torchrun, mpirun, a plain run) nothing starts.
// The monitoring issue sends its metrics the same way: send() with another "type".
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cohort/job_env.h"
#include "flight_recorder.h"

namespace cohort::detail {

struct AgentLinkOptions {
  std::string agent_socket;  // the agent's address (a path)
  std::string own_socket;    // where to bind; empty: "w<pid>.sock" in the agent socket's directory
  int heartbeat_ms = 1000;
  FlightDumpInfo identity;   // rank, world, pid... (the header of heartbeats and dumps)
};

class AgentLink {
 public:
  /// Binds (when it cannot, heartbeats still go out, unanswerable, and a warning says why) and
  /// starts the thread; the first heartbeat goes out at once.
  explicit AgentLink(AgentLinkOptions options);
  /// Stops the thread — serving a dump request that is already queued — and removes the socket.
  ~AgentLink();
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  /// Sends one datagram to the agent without blocking; false when it was dropped (agent gone,
  /// slow, or the message too large).
  bool send(const std::string& json);
  /// Where the agent's requests arrive; empty when binding failed.
  const std::string& own_socket() const { return own_path_; }
  uint64_t heartbeats_sent() const { return heartbeats_sent_.load(); }
  /// A standby worker (COHORT_STANDBY=1) waits here until its agent sends "go": it was started
  /// ahead of time with the next round's variables, and may join only once that round begins.
  /// The heartbeats already sent told the agent where to send it.
  struct Release {
    int generation = -1;  // the generation the "go" named (-1: none, a round's start)
    int fork_stdout = -1;  // "fork": the successor's stdout and stderr (this process owns them)
    int fork_stderr = -1;
  };
  Release wait_until_released();
  /// A survivor of a peer's failure waits here for the agent's "rejoin" naming a generation above
  /// `current`; std::nullopt when none comes within `timeout` (no repair: the failure is the job's).
  std::optional<int> wait_for_rejoin(int current, std::chrono::milliseconds timeout);
  /// Sends a heartbeat now (from the link's thread) instead of at the next interval.
  void beat_now();
  uint64_t dumps_written() const { return dumps_written_.load(); }
  /// Keeps the link's thread out of its work (a heartbeat, a request) while the lock is held: a
  /// fork made meanwhile copies none of the locks that work takes (the flight recorder's, the
  /// log's), which would stay locked for ever in the child.
  std::unique_lock<std::mutex> hold_still() { return std::unique_lock<std::mutex>(busy_); }
  /// In a child forked without exec: closes this process's copies of the link's descriptors; the
  /// object itself is left alone (its thread does not exist here, its socket is the parent's).
  void close_after_fork();

 private:
  void run();
  void heartbeat();
  void serve_requests();
  void serve(const std::string& text, int fds[2]);

  AgentLinkOptions options_;
  sockaddr_un agent_{};
  socklen_t agent_len_ = 0;
  std::string own_path_;
  int fd_ = -1;
  int wake_fd_ = -1;  // eventfd: the destructor wakes the thread with it
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> heartbeats_sent_{0};
  std::atomic<uint64_t> dumps_written_{0};
  std::mutex busy_;  // held by the thread while it works (hold_still())
  std::mutex released_mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;  // released_mutex_
  Release release_;  // released_mutex_: what the "go" said
  int rejoin_generation_ = -1;   // released_mutex_: the newest "rejoin"'s generation
  std::thread thread_;
};

/// Whether this process trains inside cohort::keep_running() (its heartbeats say so): the agent
/// replaces a failed peer in place only when every other worker of the round does.
void set_rejoinable(bool rejoinable);
/// Whether this process is re-forming its groups around a replaced peer (keep_running(): from the
/// failed collective until the new groups formed). Its heartbeats say so, and the agent's hang
/// rule does not count that time as a stall (the replacement may take seconds to start).
void set_rejoining(bool rejoining);

/// The newest generation the agent asked this process to rejoin as (-1: none yet). Waits on peers
/// that no process group can abandon by itself (the shared-memory barrier) give up once it rises:
/// a peer that left for the new generation will not come back to them.
int newest_rejoin_generation();

/// Starts this process's link when COHORT_AGENT_SOCKET is set (once per process; init() calls it).
void start_agent_link(const JobEnv& env);
/// This process's link, or nullptr (no agent). The monitor sends its messages through it.
AgentLink* agent_link();
/// In a spare forked from a released one (spare_fork.h): this process's own link, from the same
/// environment, under its own pid.
void restart_agent_link_after_fork(const JobEnv& env);
/// Tests: ends the link (if any), so that the next start_agent_link() reads the environment again.
/// Nothing may be sending meanwhile.
void stop_agent_link_for_testing();

}  // namespace cohort::detail
