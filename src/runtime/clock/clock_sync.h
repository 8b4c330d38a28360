// runtime/clock/clock_sync.h — measuring this rank's clock against rank 0's over the process group
// (NTP's way): a rank sends rank 0 a ping, rank 0 answers with its own clock, the rank reads its
// clock again; rank 0's stamp lies within the round trip, so offset = stamp − midpoint with an
// error of half the round trip. Of `rounds` round trips the shortest counts. Collective on the
// group: every rank calls it (Context does, whenever its groups connect: init and each rejoin);
// rank 0 answers the ranks one after another. A world of 2 on one machine takes about a millisecond.
//
// Not here: the clock's state (job_clock.h), periodic re-measurement (not done yet: the offset of
// connect time holds until the next rejoin; docs/monitoring.md#the-timeline-panel).
#pragma once

#include "cohort/torch_compat.h"
#include "job_clock.h"

namespace cohort::detail {

/// Measures this rank's offset against rank 0 over `group` (send/recv, CPU tensors) and records it
/// (set_clock_offset). Returns it; throws what the group throws.
ClockOffset sync_job_clock(Backend& group, int rank, int world_size, int rounds = 8);

}  // namespace cohort::detail
