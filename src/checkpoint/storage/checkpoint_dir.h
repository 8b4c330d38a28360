// A directory of checkpoints: listing, verifying, retiring. No torch: the `cohort ckpt` command
// and the Checkpointer share it.
//
// Layout: DIR/step-00001200/{manifest.json, model.safetensors, optimizer.safetensors, ...}.
// A checkpoint is "committed" when its manifest parses; it is "valid" when, in addition, every file
// the manifest lists exists with the listed size and XXH3-64 and every safetensors header is sound.
// Nothing here follows a symbolic link inside DIR: a step-* that is a link (or not a directory) is
// listed as no checkpoint with the reason, never read, written or emptied. DIR itself may be a link
// (the user chose that path, e.g. a link to a larger disk).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/format/manifest.h"

namespace cohort::ckpt {

struct ListedCheckpoint {
  std::string path;  // DIR/step-...
  int64_t step = -1;
  std::optional<Manifest> manifest;  // set when committed
  std::string problem;               // why it is not committed ("no manifest.json (interrupted save)", ...)
  bool foreign = false;              // a symbolic link or no directory: never a checkpoint, never removed
};

/// Empty when `path` is a directory itself (lstat: not a symbolic link to one); else why not,
/// without the path: "a symbolic link to /x (...)", "not a directory", "missing".
std::string real_directory_problem(const std::string& path);

/// Every step-* directory in `dir`, newest step first. A missing `dir` is an empty list.
/// `read_manifests` false: a checkpoint counts as committed when its manifest.json exists, and
/// `manifest` is then an empty Manifest (retention of snapshots, which runs after every step and
/// needs no more; restore always reads them).
std::vector<ListedCheckpoint> list_checkpoints(const std::string& dir, bool read_manifests = true);

/// Reads and parses PATH/manifest.json; std::nullopt with `problem` set when it cannot (also when
/// PATH is a symbolic link: real_directory_problem).
std::optional<Manifest> read_manifest(const std::string& path, std::string* problem);

/// Empty when the checkpoint at `path` is valid; otherwise the first problem, naming the file:
/// "model.safetensors: checksum mismatch (manifest 0123..., file 4567...)". Reads every byte.
/// `per_rank_files` false: only the replicated files (a snapshot on one of several machines holds
/// only its own ranks' and its buddies' per-rank files; buddy_copies.h).
std::string verify_checkpoint(const std::string& path, bool per_rank_files = true);

/// Checks one listed file against its manifest entry (size, hash, safetensors header) from bytes
/// already in memory; empty when it matches.
std::string check_file_contents(const ManifestFile& expected, const char* data, uint64_t bytes, uint64_t xxh3);

/// Removes a checkpoint so that no crash leaves it looking valid: the manifest goes first (and
/// that is made durable), then the files and the directory. Errors are ignored but counted in the
/// return value (false: something remained). A file named in `keep` (name → an existing
/// directory) is moved into that directory instead of removed: a retired snapshot's pages, kept
/// for the next one to overwrite (the Checkpointer's spare_dir() of the rank that writes it).
/// Works through a descriptor of `path` opened with O_NOFOLLOW: a `path` that is a symbolic link is
/// left as it is, its target untouched (false); a link inside is unlinked, never its target.
bool remove_checkpoint(const std::string& path, const std::map<std::string, std::string>& keep = {});

/// Removes `<name>.tmp-*` files in `path` for each of `names`: what an interrupted writer of those
/// names left behind. Only the writer of a name calls this, so it cannot hit a write in progress.
void remove_temporaries(const std::string& path, const std::vector<std::string>& names);

/// Which committed checkpoints retention removes: all but the newest `keep_last`, except those
/// whose step is a multiple of `keep_every_steps` (when > 0), which stay forever. Also every
/// uncommitted directory older than the newest committed one (an interrupted save's leftovers),
/// but never a `foreign` entry (cohort makes no links; one there is someone's, and stays).
/// `listed` is as list_checkpoints returns it.
std::vector<std::string> retired_checkpoints(const std::vector<ListedCheckpoint>& listed, int keep_last,
                                             int64_t keep_every_steps);

}  // namespace cohort::ckpt
