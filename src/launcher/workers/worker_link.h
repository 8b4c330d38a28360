// launcher/workers/worker_link.h — the agent's end of the worker link (the worker's end is
// src/runtime/agent_link/agent_link.h): one Unix datagram socket in a private run directory; heartbeats come
// in, requests (a flight-record dump) go out.
//
// The run directory is made with mkdtemp (mode 0700) in $XDG_RUNTIME_DIR, else /tmp:
//   cohort-<agent pid>-XXXXXX/agent.sock     this socket (COHORT_AGENT_SOCKET for the workers)
//   cohort-<agent pid>-XXXXXX/agent.lock     locked while the agent lives
//   cohort-<agent pid>-XXXXXX/w<pid>.sock    each worker's socket (its requests arrive there)
// Only this user can reach either. One JSON object per datagram, both ways; reading never blocks,
// sending never blocks (a worker whose queue is full misses the request). The directory lives as
// long as the agent, over every round; the destructor removes the sockets, and the directory too
// unless flight records were written into it. The agent holds a flock on agent.lock in it while it
// lives, so that the next agent removes what one killed by SIGKILL left behind.
// Deliberately not here: what a heartbeat means (hang_detector.h), the dump protocol
// (flight_dumps.h), what metrics and events mean (hub/hub.h: the message keeps its JSON).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cohort::launcher {

/// A worker's progress counters as its heartbeat reports them (src/runtime/agent_link/progress.h).
struct Heartbeat {
  int64_t step = 0;            // the reported step, else DDP iterations
  int64_t reports = 0;         // cohort::report_step() calls
  int64_t ddp_iterations = 0;
  int64_t collectives = 0;     // completed collectives
  std::string waiting_in;      // the collective it waits in ("#230 allreduce of ddp bucket 0 (...)"), or empty
  double waiting_s = 0;        // ... since this long
  bool rejoinable = false;     // it trains in cohort::keep_running(): it can rejoin around a replaced peer
  bool rejoining = false;      // it re-forms its groups around a replaced peer right now (no stall)

  bool training() const { return reports > 0 || ddp_iterations > 0; }
  bool same_progress(const Heartbeat& o) const {
    return step == o.step && reports == o.reports && ddp_iterations == o.ddp_iterations &&
           collectives == o.collectives;
  }
};

/// A released spare's answer to "go" with "fork" (src/runtime/agent_link/spare_fork.h).
struct ForkAnswer {
  pid_t spare = -1;     // its successor, waiting in init()
  std::string refused;  // else why there is none
};

struct WorkerMessage {
  std::string type;  // "heartbeat", "dumped", "forked"; unknown types are passed on (and ignored by the supervisor)
  int64_t pid = 0;
  int rank = -1;
  Heartbeat heartbeat;  // type "heartbeat"
  std::string path;     // type "dumped": the file written
  ForkAnswer fork;      // type "forked"
  nlohmann::json body;  // types "metrics" and "event" (monitoring): the whole message, for the hub
};

/// One datagram as the agent reads it, from the process `sender_pid` (as the kernel reports it).
/// Nothing (and *problem says why) for one that is not a JSON object with a pid, has a field of the
/// wrong kind, or claims another pid than its sender's: such a datagram is dropped, never acted on.
std::optional<WorkerMessage> parse_worker_datagram(const char* data, size_t n, pid_t sender_pid, std::string* problem);

class WorkerLink {
 public:
  /// Makes the run directory and binds agent.sock; throws cohort::ConfigError saying why not.
  WorkerLink();
  ~WorkerLink();
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  int fd() const { return fd_; }
  const std::string& dir() const { return dir_; }
  const std::string& socket_path() const { return socket_path_; }

  /// Every message queued now (never waits). Datagrams that are not JSON objects with a pid, with
  /// a field of the wrong kind, or whose pid is not the sending process's (as the kernel reports
  /// it) are dropped; the first is named on stderr. Remembers each sender's address for request().
  std::vector<WorkerMessage> receive();
  /// Whether this pid has sent a message from an address that can be answered.
  bool knows(pid_t pid) const { return senders_.count(pid) != 0; }
  /// Sends `json` to the worker with this pid without blocking, with copies of `fds` (SCM_RIGHTS);
  /// false when it is unknown or the message was dropped.
  bool request(pid_t pid, const std::string& json, const std::vector<int>& fds = {});
  /// The "forked" answer the released spare `pid` sent (receive() keeps it here); taken once.
  std::optional<ForkAnswer> take_fork_answer(pid_t pid);

 private:
  std::string dir_;
  std::string socket_path_;
  int fd_ = -1;
  int lock_fd_ = -1;  // agent.lock, flock()ed while this agent lives (see worker_link.cpp)
  std::map<pid_t, std::string> senders_;  // pid → the path its messages came from
  std::map<pid_t, ForkAnswer> fork_answers_;  // released spare's pid → its "forked" answer
  uint64_t dropped_ = 0;                  // datagrams dropped (receive())
};

}  // namespace cohort::launcher
