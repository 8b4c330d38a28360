// launcher/workers/snapshot_memory.h — the job's directory for in-memory snapshots (issue 19): made by the
// agent in /dev/shm (memory, private 0700) when the job starts, handed to the workers as
// COHORT_SNAPSHOT_DIR, removed with everything in it when the job ends. It lives as long as the
// agent, not the workers: a worker's replacement finds the snapshots its predecessor wrote.
// The Checkpointer uses it when asked (CheckpointOptions::snapshot_every_steps); unused, it is an
// empty directory. An agent killed by SIGKILL cannot remove it; the next agent on the machine does
// (the directory's lock is held by its agent for as long as it lives, as with the run directory).
#pragma once

#include <string>
#include <vector>

namespace cohort::launcher {

class SnapshotMemory {
 public:
  /// Makes the directory; none (an empty dir(), a warning on stderr) when /dev/shm is missing or
  /// refuses, or when the user set COHORT_SNAPSHOT_DIR (then the workers inherit theirs).
  SnapshotMemory();
  ~SnapshotMemory();
  SnapshotMemory(const SnapshotMemory&) = delete;
  SnapshotMemory& operator=(const SnapshotMemory&) = delete;

  const std::string& dir() const { return dir_; }
  /// COHORT_SNAPSHOT_DIR=<dir> for the workers, or nothing.
  std::vector<std::string> worker_variables() const;

 private:
  std::string dir_;
  int lock_fd_ = -1;
};

}  // namespace cohort::launcher
