// Per-rank snapshot files kept on a buddy machine too. See buddy_copies.h.
//
// On the wire, one rank's files are one byte tensor (a blob: file_blob.h); its size goes first
// (one int64).
#include "checkpoint/snapshots/buddy_copies.h"

#include <torch/torch.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>
#include <stdexcept>
#include <string_view>

#include "checkpoint/agreement.h"
#include "checkpoint/format/rank_state_file.h"
#include "checkpoint/snapshots/file_blob.h"
#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/storage/file_io.h"
#include "runtime/log.h"
#include "runtime/context_internals.h"

namespace cohort::ckpt {
namespace {

bool per_rank(const ManifestFile& f) { return f.role == "shard" || f.role == "rank_state"; }

std::string pack(const std::string& step_dir, const std::vector<ManifestFile>& files, int rank) {
  std::vector<NamedBytes> read;
  for (const auto& f : files) read.push_back({f.name, read_small_file(step_dir + "/" + f.name, f.bytes, rank)});
  return pack_files(read, "buddy-copy");
}

// The blob's files, each intact (file_blob.h); `allowed(name)` says which names may come.
template <typename Allowed>
UnpackedFiles unpack(const char* blob, size_t size, Allowed allowed) {
  UnpackedFiles out = unpack_files(blob, size);
  for (const auto& [name, data] : out.files)
    if (out.problem.empty() && !allowed(name)) out = {{}, "a file that is not expected: \"" + name + "\""};
  return out;
}

void write_into(const std::string& step_dir, const std::vector<std::pair<std::string, std::string_view>>& files, int rank) {
  for (const auto& [name, data] : files) {
    AtomicWriter out(step_dir, name, rank, /*allow_direct=*/false);
    out.write(data.data(), data.size());
    out.finish();
  }
  fsync_dir(step_dir, rank);
}

// Both works, made visible to abort_exchange() while they are waited for.
void wait_both(Buddies::InFlight& in_flight, WorkHandle& sent, WorkHandle& received) {
  {
    std::lock_guard<std::mutex> lock(in_flight.mutex);
    in_flight.works = {sent, received};
    if (in_flight.aborted) {
      for (auto& w : in_flight.works)
        if (w) w->abort();
    }
  }
  try {
    if (sent) sent->wait();
    if (received) received->wait();
  } catch (...) {
    std::lock_guard<std::mutex> lock(in_flight.mutex);
    in_flight.works.clear();
    throw;
  }
  std::lock_guard<std::mutex> lock(in_flight.mutex);
  in_flight.works.clear();
  if (in_flight.aborted) throw std::runtime_error("the job re-forms; the exchange was given up");
}

// Sends `out` to the buddy (rank 1 of b.to_group) and receives what b.from sends (rank 0 of
// b.from_group), sizes first; returns the received bytes.
at::Tensor swap_blobs(const Buddies& b, const std::string& out, int tag) {
  Backend &to = *b.to_group, &from = *b.from_group;
  Buddies::InFlight& in_flight = *b.in_flight;
  std::vector<at::Tensor> out_size{at::full({1}, static_cast<int64_t>(out.size()), at::kLong)};
  std::vector<at::Tensor> in_size{at::zeros({1}, at::kLong)};
  WorkHandle sent = to.send(out_size, 1, tag), received = from.recv(in_size, 0, tag);
  wait_both(in_flight, sent, received);
  const int64_t in_bytes = in_size[0].item<int64_t>();
  if (in_bytes < 0 || in_bytes > (int64_t{1} << 40)) throw std::runtime_error("an impossible size: " + std::to_string(in_bytes));
  std::vector<at::Tensor> out_blob{at::empty({static_cast<int64_t>(out.size())}, at::kByte)};
  std::vector<at::Tensor> in_blob{at::empty({in_bytes}, at::kByte)};
  if (!out.empty()) std::memcpy(out_blob[0].data_ptr(), out.data(), out.size());
  sent.reset();
  received.reset();
  if (!out.empty()) sent = to.send(out_blob, 1, tag + 1);
  if (in_bytes > 0) received = from.recv(in_blob, 0, tag + 1);
  wait_both(in_flight, sent, received);
  return in_blob[0];
}

}  // namespace

Buddies make_buddies(Context& ctx) {
  const int world = ctx.world_size(), per_machine = ctx.local_world_size();
  // Machines of equally many ranks, numbered machine by machine, and more than one of them.
  const bool shaped = per_machine > 0 && world % per_machine == 0 && world / per_machine > 1 &&
                      ctx.rank() == ctx.env().node_rank * per_machine + ctx.local_rank();
  const int64_t agreed = allreduce_int(ctx, shaped ? per_machine : -1, c10d::ReduceOp::MIN);
  if (agreed != per_machine || allreduce_int(ctx, per_machine, c10d::ReduceOp::MAX) != per_machine) return {};
  Buddies b;
  b.world = world;
  b.to = (ctx.rank() + per_machine) % world;
  b.from = (ctx.rank() - per_machine + world) % world;
  // A pair's group is named by its sender. Making one waits for the other rank to make it too, so
  // if every rank made its `to` pair first, each would wait on the next around the ring for ever:
  // the first machine makes its `from` pair first, which the last machine makes first, and that
  // unwinds the ring backwards (two machines: both make the pair sent from machine 1 first).
  auto pair = [&](int sender, int rank_in_pair) {
    return detail::make_cpu_subgroup(ctx, "cohort/snapshot-buddies/" + std::to_string(sender) + "/", rank_in_pair, 2);
  };
  if (ctx.env().node_rank == 0) {
    b.from_group = pair(b.from, 1);
    b.to_group = pair(ctx.rank(), 0);
  } else {
    b.to_group = pair(ctx.rank(), 0);
    b.from_group = pair(b.from, 1);
  }
  if (!b.to_group || !b.from_group) return {};
  return b;
}

std::string exchange_with_buddies(const Buddies& b, const std::string& step_dir, const std::vector<ManifestFile>& own,
                                  int rank, int64_t tag) {
  std::string blob, problem;
  try {
    blob = pack(step_dir, own, rank);
  } catch (const std::exception& e) {
    problem = std::string("reading this rank's files for its buddy: ") + e.what();  // nothing is sent
  }
  at::Tensor in;
  try {
    in = swap_blobs(b, blob, static_cast<int>((tag % (1 << 20)) * 2));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return "the copy for or from a buddy (ranks " + std::to_string(b.to) + ", " + std::to_string(b.from) +
           ") did not go through: " + what.substr(0, what.find('\n'));
  }
  if (!problem.empty()) return problem;
  if (in.numel() == 0) return "rank " + std::to_string(b.from) + " sent no copy of its files";
  const int world = b.world;
  const std::string shard = per_rank_file_name("shard", b.from, world), state = per_rank_file_name("rank", b.from, world);
  auto got = unpack(static_cast<const char*>(in.data_ptr()), static_cast<size_t>(in.numel()),
                    [&](const std::string& name) { return name == shard || name == state; });
  if (!got.problem.empty()) return "the copy of rank " + std::to_string(b.from) + "'s files: " + got.problem;
  try {
    write_into(step_dir, got.files, rank);
  } catch (const std::exception& e) {
    return std::string("writing the copy of rank ") + std::to_string(b.from) + "'s files: " + e.what();
  }
  return "";
}

void abort_exchange(const Buddies& b) {
  if (!b.in_flight) return;
  std::lock_guard<std::mutex> lock(b.in_flight->mutex);
  b.in_flight->aborted = true;
  for (auto& w : b.in_flight->works)
    if (w) w->abort();
}

namespace {

// This machine's copy of `f` in step_dir: there, a regular file of the manifest's size.
bool present(const std::string& step_dir, const ManifestFile& f) {
  struct stat st {};
  return ::lstat((step_dir + "/" + f.name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == f.bytes;
}

}  // namespace

void complete_per_rank_files(Context& ctx, const std::string& step_dir) {
  const int rank = ctx.rank(), world = ctx.world_size();
  const bool writer = ctx.local_rank() == 0;  // one per machine
  std::vector<ManifestFile> files;
  if (writer && real_directory_problem(step_dir).empty()) {  // a link: no copy here, nothing read through it
    try {
      const Manifest m = Manifest::parse(read_small_file(step_dir + "/" + kManifestName, kMaxManifestBytes, rank));
      for (const auto& f : m.files)
        if (per_rank(f)) files.push_back(f);
    } catch (const std::exception&) {
      files.clear();  // no copy of this snapshot here: this machine only takes part
    }
  }
  // Every machine has the same manifest (rank 0's), or none: the number of per-rank files agreed.
  const int64_t count = allreduce_int(ctx, static_cast<int64_t>(files.size()), c10d::ReduceOp::MAX);
  if (count == 0) return;
  const bool has_manifest = static_cast<int64_t>(files.size()) == count;
  // have[i][r]: writer r's machine holds file i; need[i][r]: it has the manifest but not the file.
  at::Tensor have = at::zeros({count, world}, at::kLong), need = at::zeros({count, world}, at::kLong);
  if (writer && has_manifest) {
    for (int64_t i = 0; i < count; ++i) {
      const bool here = present(step_dir, files[static_cast<size_t>(i)]);
      have[i][rank] = here ? 1 : 0;
      need[i][rank] = here ? 0 : 1;
    }
  }
  std::vector<at::Tensor> both{at::cat({have, need})};
  ctx.group()->allreduce(both)->wait();
  const auto flags = both[0].accessor<int64_t, 2>();  // rows 0..count-1: have; count..2 count-1: need
  for (int64_t i = 0; i < count; ++i) {
    int64_t needed = 0;
    for (int r = 0; r < world; ++r) needed += flags[count + i][r];
    if (needed == 0) continue;
    int sender = -1;
    for (int r = 0; r < world && sender < 0; ++r)
      if (flags[i][r] > 0) sender = r;
    if (sender < 0) continue;  // on no machine any more: the restore goes older
    std::string bytes;
    if (rank == sender) {
      const ManifestFile& f = files[static_cast<size_t>(i)];
      try {
        bytes = read_small_file(step_dir + "/" + f.name, f.bytes, rank);
        const std::string problem = check_file_contents(f, bytes.data(), bytes.size(), XXH3_64bits(bytes.data(), bytes.size()));
        if (!problem.empty()) throw std::runtime_error(problem);
      } catch (const std::exception& e) {
        detail::log_warn("the snapshot file " + f.name + " is not sent to the machines that lack it: " + e.what());
        bytes.clear();
      }
    }
    const int64_t size = allreduce_int(ctx, static_cast<int64_t>(bytes.size()), c10d::ReduceOp::MAX);
    if (size == 0) continue;
    std::vector<at::Tensor> data{at::empty({size}, at::kByte)};
    if (rank == sender) std::memcpy(data[0].data_ptr(), bytes.data(), bytes.size());
    c10d::BroadcastOptions options;
    options.rootRank = sender;
    ctx.group()->broadcast(data, options)->wait();
    if (!writer || !has_manifest || flags[count + i][rank] == 0) continue;
    const ManifestFile& f = files[static_cast<size_t>(i)];
    const char* p = static_cast<const char*>(data[0].data_ptr());
    std::string problem = check_file_contents(f, p, static_cast<uint64_t>(size), XXH3_64bits(p, static_cast<size_t>(size)));
    if (problem.empty()) {
      try {
        write_into(step_dir, {{f.name, std::string_view(p, static_cast<size_t>(size))}}, rank);
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    if (problem.empty())
      detail::log(detail::LogLevel::info, "received " + f.name + " of " + step_dir + " from rank " + std::to_string(sender));
    else
      detail::log_warn("the snapshot file " + f.name + " from rank " + std::to_string(sender) + " is not used (" + problem +
                       "); the restore takes what every rank has");
  }
  allreduce_int(ctx, 0, c10d::ReduceOp::SUM);  // the machine's other ranks look only once it is written
}

}  // namespace cohort::ckpt
