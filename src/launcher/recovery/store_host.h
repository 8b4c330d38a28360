// launcher/recovery/store_host.h — node 0's agent hosts the workers' TCPStore, so that it outlives
// every worker (`cohort run --keep-survivors` on several machines).
//
// A job of several machines meets in a TCPStore that rank 0's worker hosts; when rank 0 dies the
// store goes with it, and no survivor can meet its replacement. With --keep-survivors node 0's agent
// runs `cohort-store` (tools/store_host_main.cpp: the launcher has no torch, and the store must
// speak the workers' libtorch) for each round, and every worker gets COHORT_STORE_HOSTED=1. As
// torchrun's agent hosts the store its workers share. A store file does the same on one machine.
#pragma once

#include <sys/types.h>

#include <string>

#include "launcher/config/options.h"

namespace cohort::launcher {

/// Whether node 0's agent hosts this job's store: --keep-survivors on several machines (static
/// membership; an elastic job's workers meet in a new world instead of rejoining).
bool agent_hosts_store(const RunOptions& o);

class StoreHost {
 public:
  StoreHost() = default;
  ~StoreHost() { stop(); }
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;

  /// Starts `cohort-store` (found next to the running `cohort`) on addr:port and waits until it
  /// listens (at most `timeout_s`). Throws cohort::ConfigError naming the cause: the program
  /// missing, the port taken, the address not this machine's, no word in time.
  void start(const std::string& addr, int port, double timeout_s);
  /// Ends it (SIGTERM, then SIGKILL after a second) and reaps it; nothing when none runs.
  void stop();

 private:
  pid_t pid_ = -1;
};

}  // namespace cohort::launcher
