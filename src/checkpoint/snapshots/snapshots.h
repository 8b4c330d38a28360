// In-memory snapshots (issue 19), the pieces the Checkpointer needs besides its own saving and
// restoring: where a job's snapshots live, and how their listing joins the disk's.
//
// A snapshot is a checkpoint like any other (same files, manifest, checksums, commit), written by
// a second, inner Checkpointer into a directory in memory (tmpfs, /dev/shm) that outlives a killed
// worker: a restarted rank on the same machine reads it back at memory speed instead of going back
// to the last checkpoint on disk. Why files in tmpfs rather than the worker's own heap: the
// replacement of a SIGKILLed worker is a new process, and only memory that no process owns survives
// the old one; the format and its verification are the disk checkpoints', so a torn or corrupt
// snapshot is skipped exactly as a bad checkpoint is. No torch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/storage/checkpoint_dir.h"

namespace cohort::ckpt {

/// The directory for the snapshots of the checkpoints in `checkpoint_dir`: under `configured`, or
/// else COHORT_SNAPSHOT_DIR, a sub-directory named after `checkpoint_dir` (two Checkpointers of one
/// job keep apart). Empty, with the reason in `why_none`, when there is neither, or when that
/// sub-directory exists as a symbolic link or a file.
std::string snapshot_dir_for(const std::string& configured, const std::string& checkpoint_dir, std::string* why_none);

/// Both listings as one, newest step first; at the same step the disk checkpoint comes first (it is
/// the one a finished job's last save wrote on purpose, with its final metadata).
std::vector<ListedCheckpoint> merge_listings(std::vector<ListedCheckpoint> disk, std::vector<ListedCheckpoint> snapshots);

/// Removes the snapshots in `dir` newer than `step`: after a restore went back to `step`, they
/// belong to a history the job no longer has, and retention (newest two) would keep them forever.
void drop_snapshots_after(const std::string& dir, int64_t step);

}  // namespace cohort::ckpt
