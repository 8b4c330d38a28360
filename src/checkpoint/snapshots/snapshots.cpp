// Where snapshots live and how their listing joins the disk's. See snapshots.h.
#include "checkpoint/snapshots/snapshots.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "runtime/log.h"

namespace cohort::ckpt {

std::string snapshot_dir_for(const std::string& configured, const std::string& checkpoint_dir, std::string* why_none) {
  std::string base = configured;
  if (base.empty())
    if (const char* env = std::getenv("COHORT_SNAPSHOT_DIR")) base = env;
  if (base.empty()) {
    *why_none = "no snapshot directory (set CheckpointOptions::snapshot_dir, or run under cohort run, which sets "
                "COHORT_SNAPSHOT_DIR)";
    return "";
  }
  // The checkpoint directory as the ranks spell it (they are given the same one); its hash keeps
  // two Checkpointers of one job apart without putting a path inside a path.
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(checkpoint_dir, ec).lexically_normal().string();
  const std::string key = ec ? checkpoint_dir : absolute;
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%016llx", static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string dir = base + "/" + name;
  // The base may be a link (the user's choice); the directory cohort names in it may not: in a
  // shared base (/dev/shm) one planted there would take this job's snapshots, and their removal,
  // wherever it points.
  if (const std::string why = real_directory_problem(dir); !why.empty() && why != "missing") {
    *why_none = "the snapshot directory " + dir + " is " + why;
    detail::log_warn("no in-memory snapshots: " + *why_none);  // by every rank that finds it (rank 0 may not)
    return "";
  }
  return dir;
}

std::vector<ListedCheckpoint> merge_listings(std::vector<ListedCheckpoint> disk, std::vector<ListedCheckpoint> snapshots) {
  std::vector<ListedCheckpoint> all = std::move(disk);
  all.insert(all.end(), std::make_move_iterator(snapshots.begin()), std::make_move_iterator(snapshots.end()));
  // Stable: the disk's entries were first, so at one step they stay first.
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return all;
}

void drop_snapshots_after(const std::string& dir, int64_t step) {
  for (const auto& c : list_checkpoints(dir, /*read_manifests=*/false))
    if (c.step > step && !c.foreign) remove_checkpoint(c.path);  // a link stays, its target untouched
}

}  // namespace cohort::ckpt
