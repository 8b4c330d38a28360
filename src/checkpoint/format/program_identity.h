// Which program wrote an in-memory snapshot (issue 19: "a replacement of another program version:
// detected and named"). Snapshots are the fast path between restarts of one job; when the program
// changed in between — a new build rolled out under the same path, a warm spare started from
// another binary — the state they hold may not mean what the new code expects. So each snapshot
// records its writer's identity, and restore skips the snapshots another program wrote, with a
// warning naming both identities, for the checkpoints on disk, whose format is what holds across
// versions (a checkpoint of another model still fails as before, naming the tensor).
//
// The identity is COHORT_PROGRAM_VERSION when set (a label the user controls, such as a git commit:
// needed where the executable says nothing, as for a JVM hosting libtorch), else "exe-xxh3:" and the
// XXH3-64 of the running executable (/proc/self/exe: the file this process runs, even when the path
// has been replaced since). Shared libraries are not part of it: a new libcohort.so under the same
// program needs the label. Internal header, no torch.
#pragma once

#include <string>

namespace cohort::ckpt {

/// This process's program identity (above); "" when neither the label nor the executable can be
/// read (then no snapshot is refused on this ground). The executable is hashed once per process.
/// A label longer than 200 characters is a ConfigError naming COHORT_PROGRAM_VERSION and `rank`.
std::string program_identity(int rank);

}  // namespace cohort::ckpt
