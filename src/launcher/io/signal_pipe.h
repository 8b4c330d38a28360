// launcher/io/signal_pipe.h — signals as events in the launcher's poll loop (the self-pipe trick).
//
// SIGINT, SIGTERM, SIGHUP and SIGCHLD handlers only write the signal number to a pipe; the
// supervision loop polls its read end with the workers' pipes and sockets, so all decisions happen
// in ordinary code. SIGPIPE is ignored (a closed console must not kill the launcher and, through
// the parent-death signal, the job); spawn.cpp restores the defaults in workers.
#pragma once

#include <stdexcept>
#include <vector>

namespace cohort::launcher {

/// Thrown by the waiting loops outside supervision (rendezvous, between rounds) when SIGINT,
/// SIGTERM or SIGHUP arrives: the job ends, it is never restarted.
struct Interrupted : std::runtime_error {
  explicit Interrupted(int sig) : std::runtime_error("interrupted"), signal(sig) {}
  int signal;
};

class SignalPipe {
 public:
  /// Installs the handlers (once per process).
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// The descriptor to poll for POLLIN.
  int fd() const { return read_fd_; }

  /// The signals received since the last call, in arrival order.
  std::vector<int> drain();

  /// Drains the pipe; throws Interrupted if SIGINT, SIGTERM or SIGHUP was among the signals.
  void throw_if_interrupted();

 private:
  int read_fd_ = -1;
};

}  // namespace cohort::launcher
