// checkpoint/snapshots/buddy_copies.h — state that only its own rank holds, kept on a second
// machine too (issue 19).
//
// Each machine keeps a whole copy of the replicated state (snapshot_sharing.h), but a shard of a
// sharded model, or a comm hook's per-rank state (PowerSGD's errors), exists on one rank only: a
// lost machine would take it along. So each rank's per-rank snapshot files are also written on its
// buddy: the rank with the same local rank on the next machine (rank + ranks per machine, around
// the ring). The exchange runs on the snapshot writers' threads over Gloo groups of their own —
// never the training's group, whose collectives the training thread issues meanwhile: one group
// of two ranks per ring neighbour, as a Gloo group connects every pair of its ranks when it is
// made (a group of the whole job: n - 1 connections per rank, for two that talk) — before
// each rank reports its part: a snapshot commits only once every buddy copy is written and checked
// (sizes and XXH3-64 on arrival; restore verifies again against the manifest).
//
// At restore, a machine that lost its memory gets the replicated files from any machine
// (snapshot_sharing.cpp) and the per-rank files from the machines that hold them: its ranks' own
// from their buddies — and, when the job's world size changed, whatever the resharding reads.
// Losing a rank and its buddy together (two neighbouring machines) leaves that state nowhere in
// memory: the restore then takes the newest checkpoint on disk. Needs machines with equally many
// ranks, numbered machine by machine (what cohort run makes); otherwise no buddies, and a job of
// several machines with per-rank state keeps to disk.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/format/manifest.h"
#include "cohort/context.h"

namespace cohort::ckpt {

struct Buddies {
  int to = -1;    // the rank that keeps a copy of this rank's files
  int from = -1;  // the rank whose files this rank keeps a copy of
  int world = 0;  // the job's world size (names the per-rank files)
  // The writers' own groups of two: this rank (0) and `to` (1); `from` (0) and this rank (1).
  c10::intrusive_ptr<Backend> to_group, from_group;
  // The exchange's send and receive in flight on the writer's thread, for abort_exchange().
  struct InFlight {
    std::mutex mutex;
    std::vector<WorkHandle> works;
    bool aborted = false;
  };
  std::shared_ptr<InFlight> in_flight = std::make_shared<InFlight>();
  bool active() const { return to >= 0 && to_group && from_group; }
};

/// Collective (every rank, from the Checkpointer's constructor): the buddies of a job on several
/// machines of equally many ranks; inactive otherwise (one machine, uneven machines, no Gloo).
Buddies make_buddies(Context& ctx);

/// On the snapshot writer's thread: sends this rank's per-rank files in `step_dir` (`own`) to
/// `to` and writes `from`'s into `step_dir`, checked. Returns the problem, empty when both went
/// through; every rank of the job calls it for the same save (`tag` tells saves apart).
std::string exchange_with_buddies(const Buddies& b, const std::string& step_dir, const std::vector<ManifestFile>& own,
                                  int rank, int64_t tag);

/// From another thread (the job re-forms: Context::rejoin): the exchange in flight, and any that
/// starts later on `b`, fails at once. A buddy that closed its connections makes ours fail, but
/// Gloo wakes no wait on the side that closed first: this is what ends this rank's own.
void abort_exchange(const Buddies& b);

/// Restore, collective (training thread, the job's group), for the snapshot in each machine's
/// `step_dir` (the same step on every machine): every per-rank file its manifest lists that a
/// machine lacks (it replaced a lost one, or it holds only its own ranks' and its buddies' files
/// and the job now reshards) is sent from the lowest rank whose machine holds it intact, checked
/// against the manifest on arrival and written. A file no machine holds any more stays missing:
/// the restore then goes to an older snapshot or the disk.
void complete_per_rank_files(Context& ctx, const std::string& step_dir);

}  // namespace cohort::ckpt
