// Sending the newest snapshot to the machines that lack it. See snapshot_sharing.h.
//
// One round of the job's CPU group: each machine's first rank finds its newest snapshot that
// verifies; the ranks agree on the newest of all (MAX), on who sends it (the lowest such rank) and
// on whether any machine lacks it; the sender packs its files into one byte tensor, which is
// broadcast; the machines that lack it unpack, check and write it; a last allreduce keeps each
// machine's other ranks from reading the directory before its first rank has written it.
#include "checkpoint/snapshots/snapshot_sharing.h"

#include <torch/torch.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "checkpoint/agreement.h"
#include "checkpoint/snapshots/buddy_copies.h"
#include "checkpoint/snapshots/file_blob.h"
#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/storage/file_io.h"
#include "cohort/context.h"
#include "cohort/error.h"
#include "runtime/log.h"

namespace cohort::ckpt {
namespace {

struct Newest {
  int64_t step = -1;
  std::string path;
  std::optional<Manifest> manifest;
};

// This machine's newest snapshot whose replicated files verify (every byte read against its
// manifest); the per-rank files are the buddies' business (buddy_copies.h), checked at restore.
Newest newest_valid(const std::string& dir) {
  for (auto& c : list_checkpoints(dir)) {
    if (!c.manifest) continue;
    if (const std::string problem = verify_checkpoint(c.path, /*per_rank_files=*/false); !problem.empty()) {
      detail::log_warn("snapshot " + c.path + " is not sent to other machines: " + problem);
      continue;
    }
    return {c.step, c.path, std::move(c.manifest)};
  }
  return {};
}

bool replicated(const ManifestFile& f) { return f.role == "model" || f.role == "optimizer"; }

// The snapshot's replicated files as one blob (file_blob.h), the manifest first. Per-rank files
// (shards, a comm hook's state) come from the machines that hold them (buddy_copies.h).
std::string pack(const Newest& n, int rank) {
  // Regular files only, and no more than the manifest lists (file_io.h): a snapshot directory is
  // read as carefully as a checkpoint.
  std::vector<NamedBytes> files{{kManifestName, read_small_file(n.path + "/" + kManifestName, kMaxManifestBytes, rank)}};
  for (const auto& f : n.manifest->files)
    if (replicated(f)) files.push_back({f.name, read_small_file(n.path + "/" + f.name, f.bytes, rank)});
  return pack_files(files, "snapshot-sent");
}

// Checks the blob's files against its manifest and writes them into dir/step-N/ (manifest last,
// each atomically). Returns the problem, empty when the snapshot was written.
std::string unpack(const std::string& dir, int64_t step, const char* blob, size_t size, int rank) {
  const UnpackedFiles unpacked = unpack_files(blob, size);
  if (!unpacked.problem.empty()) return unpacked.problem;
  const auto& files = unpacked.files;
  if (files.empty()) return "no files";
  Manifest m;
  try {
    m = Manifest::parse(std::string(files[0].second));
  } catch (const std::exception& e) {
    return std::string("manifest: ") + e.what();
  }
  if (files[0].first != kManifestName || m.step != step) return "not the snapshot of step " + std::to_string(step);
  for (const auto& expected : m.files) {
    if (!replicated(expected)) continue;
    auto it = std::find_if(files.begin(), files.end(), [&](const auto& f) { return f.first == expected.name; });
    if (it == files.end()) return expected.name + ": missing";
    const std::string problem =
        check_file_contents(expected, it->second.data(), it->second.size(), XXH3_64bits(it->second.data(), it->second.size()));
    if (!problem.empty()) return problem;
  }
  const std::string path = dir + "/" + step_dir_name(step);
  remove_checkpoint(path);  // an uncommitted one of this step (or a bad one): nothing of it stays
  if (const std::string why = real_directory_problem(path); !why.empty() && why != "missing")
    return path + ": " + why;  // a link stays as it is, and nothing is written through it
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw CheckpointError(rank, "could not create " + path + ": " + ec.message());
  for (size_t i = 1; i < files.size(); ++i) {
    AtomicWriter out(path, files[i].first, rank, /*allow_direct=*/false);
    out.write(files[i].second.data(), files[i].second.size());
    out.finish();
  }
  AtomicWriter manifest(path, kManifestName, rank, /*allow_direct=*/false);
  manifest.write(files[0].second.data(), files[0].second.size());
  manifest.finish();
  fsync_dir(path, rank);
  return "";
}

}  // namespace

void share_newest_snapshot(Context& ctx, const std::string& dir) {
  const int rank = ctx.rank();
  const bool writer = ctx.local_rank() == 0;  // one per machine
  const Newest mine = writer ? newest_valid(dir) : Newest{};
  const int64_t best = allreduce_int(ctx, mine.step, c10d::ReduceOp::MAX);
  if (best < 0) return;
  const int64_t sender = allreduce_int(ctx, writer && mine.step == best ? rank : INT64_MAX, c10d::ReduceOp::MIN);
  if (allreduce_int(ctx, writer && mine.step != best ? 1 : 0, c10d::ReduceOp::SUM) > 0) {
    std::string blob;
    if (rank == sender) blob = pack(mine, rank);
    const int64_t size = allreduce_int(ctx, static_cast<int64_t>(blob.size()), c10d::ReduceOp::MAX);
    if (size == 0) return;
    at::Tensor bytes = at::empty({size}, at::kByte);
    if (rank == sender) std::memcpy(bytes.data_ptr(), blob.data(), blob.size());
    std::vector<at::Tensor> tensors{bytes};
    c10d::BroadcastOptions options;
    options.rootRank = static_cast<int>(sender);
    ctx.group()->broadcast(tensors, options)->wait();
    if (writer && mine.step != best) {
      const std::string problem =
          unpack(dir, best, static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(size), rank);
      if (problem.empty())
        detail::log(detail::LogLevel::info, "received the snapshot of step " + std::to_string(best) + " from rank " +
                                                std::to_string(sender) + " into " + dir);
      else
        detail::log_warn("the snapshot of step " + std::to_string(best) + " from rank " + std::to_string(sender) +
                         " is not used (" + problem + "); the restore takes what every machine has");
    }
  }
  // Per-rank files (shards, a comm hook's state): each machine holds its own ranks' and its
  // buddies' (buddy_copies.h); what a machine lacks comes from one that has it. Also the barrier
  // that keeps each machine's other ranks from reading the directory before its first rank wrote it.
  complete_per_rank_files(ctx, dir + "/" + step_dir_name(best));
}

}  // namespace cohort::ckpt
