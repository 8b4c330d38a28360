// checkpoint/snapshots/snapshot_sharing.h — a restore's first step when each machine keeps its own copy of
// the job's snapshots (snapshots.h): the newest snapshot some machine holds intact is sent to the
// machines that lack it — one that replaced a lost machine, or whose memory went with its agent —
// so that losing a whole machine costs a restart no more steps than losing a worker does.
//
// The replicated state travels in one broadcast; per-rank files (shards, a comm hook's state) come
// from the machines that hold them (buddy_copies.h). The receivers check every byte against the
// manifest on arrival (sizes, XXH3-64, safetensors headers) before writing anything; a copy that
// fails is named in a warning and not written, and the restore then takes what every machine has
// (an older snapshot, or the checkpoints on disk): never a wrong state.
#pragma once

#include <string>

namespace cohort {
class Context;
namespace ckpt {

/// Collective: every rank calls it with its machine's snapshot directory. Afterwards every
/// machine's directory holds the newest snapshot that verified on its sender, unless its copy
/// arrived damaged (then nothing changed there).
void share_newest_snapshot(Context& ctx, const std::string& dir);

}  // namespace ckpt
}  // namespace cohort
