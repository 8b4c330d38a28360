// runtime/net/gloo_abandon.h — closing a Gloo process group's connections, so that its peers stop waiting.
//
// When the job re-forms around a replaced peer (Context::rejoin), a peer may still wait in one of
// this rank's old groups for data this rank will never send (a ring step, a bucket between nodes).
// c10d's ProcessGroupGloo cannot be aborted (its destructor waits for its work, which waits for
// its peers, which may wait for it), so cohort closes each of the group's connections itself,
// with a reset: every peer's operations on them fail at once. Operations waiting on this rank's
// own side are not woken by that (Gloo signals only the side that sees the reset): whoever waits
// for one aborts it (c10d's Work::abort(), as the snapshots' buddy exchange does).
#pragma once

#include "cohort/torch_compat.h"

namespace cohort::detail {

/// Closes every connection of `group` when it is a Gloo group (else nothing).
void abandon_gloo_group(Backend& group);

}  // namespace cohort::detail
