// bench/data/data_peers.cpp — cohort's side of bench/data/data_peers.sh (issue 46, the peers):
// generates the token data set all three loaders read (`--generate`), or reads one epoch of it with
// ShardedDataset and resumes 90 % into that epoch, printing one JSON line.
//
// The epoch: every shard's pages dropped from the page cache first (fdatasync, then
// posix_fadvise(DONTNEED)), one ShardedDataset at world size 1 with the default block shuffle
// (blocks of 4096 samples, windows of 8 blocks), seq_len 1024, `--batch` samples per batch, int64
// tensors out (inputs and targets), reading ahead 2 batches on its one background thread (the
// only thread besides the main one). The state is taken after 90 % of the epoch's batches and the
// next batch kept. The resume: the pages dropped again, a new ShardedDataset constructed, the
// state loaded, the first batch read — the time of those three; that batch must equal the kept
// one, and each row the tokens of the sample sample_at() names, read from the shard file itself.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_token_set.h"
#include "cohort/sharded_dataset.h"
#include "data/prepare/shard_writer.h"
#include "data/shards/manifest.h"

namespace {

using PeersClock = std::chrono::steady_clock;
double peers_seconds_since(PeersClock::time_point t) {
  return std::chrono::duration<double>(PeersClock::now() - t).count();
}



// The tokens of sample `index` (seq_len + 1 of them), read from its shard file: windows start every
// seq_len tokens inside a shard and do not cross into the next (docs/data.md, "Samples").
std::vector<int64_t> peers_sample_tokens(const std::string& dir, const cohort::data::Manifest& m, uint64_t index,
                                         int64_t seq_len) {
  for (const auto& s : m.shards) {
    const uint64_t n = s.items > 0 ? (s.items - 1) / static_cast<uint64_t>(seq_len) : 0;
    if (index >= n) {
      index -= n;
      continue;
    }
    std::ifstream in(dir + "/" + s.data.file, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(index * static_cast<uint64_t>(seq_len) * 2));
    std::vector<uint16_t> raw(static_cast<size_t>(seq_len + 1));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size() * 2));
    return {raw.begin(), raw.end()};
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort's side of bench/data/data_peers.sh"};
  std::string dir;
  double gib = 0;
  int64_t seq_len = 1024, batch = 64;
  uint64_t shard_mib = 256;
  app.add_option("--dir", dir, "the data set")->required();
  app.add_option("--generate", gib, "write a data set of this many GiB into --dir and exit");
  app.add_option("--shard-mib", shard_mib, "shard size when generating")->capture_default_str();
  app.add_option("--seq-len", seq_len)->capture_default_str();
  app.add_option("--batch", batch, "samples per batch (world size 1)")->capture_default_str();
  bool warm = false;
  app.add_flag("--warm", warm, "leave the files' pages in the page cache (the default drops them before each reader)");
  CLI11_PARSE(app, argc, argv);
  if (gib > 0) {
    bench_data::generate_token_set(dir, static_cast<uint64_t>(gib * (1ull << 30)), shard_mib << 20, 46);
    return 0;
  }
  const cohort::data::Manifest m = cohort::data::read_manifest(dir);
  auto evict_all = [&] {
    if (warm) return;
    for (const auto& s : m.shards) bench_data::evict_from_page_cache(dir + "/" + s.data.file);
  };

  cohort::ShardedDatasetOptions o;
  o.seq_len = seq_len;
  o.global_batch = batch;
  o.seed = 1;
  evict_all();
  auto t = PeersClock::now();
  cohort::ShardedDataset data(dir, 0, 1, o);
  const int64_t steps = data.steps_per_epoch();
  const int64_t resume_step = steps * 9 / 10;
  std::string state;
  torch::Tensor kept;
  int64_t samples = 0, checksum = 0;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == resume_step) state = data.state_dict();
    auto b = data.get_batch(static_cast<size_t>(batch));
    samples += b->data.size(0);
    checksum += b->data[0][0].item<int64_t>();
    if (step == resume_step) kept = torch::cat({b->data, b->target.narrow(1, seq_len - 1, 1)}, 1);
  }
  const double epoch_s = peers_seconds_since(t);

  evict_all();
  t = PeersClock::now();
  cohort::ShardedDataset resumed(dir, 0, 1, o);
  const double build_s = peers_seconds_since(t);
  resumed.load_state_dict(state);
  const double load_s = peers_seconds_since(t) - build_s;
  auto first = resumed.get_batch(static_cast<size_t>(batch));
  const double resume_s = peers_seconds_since(t);

  const torch::Tensor got = torch::cat({first->data, first->target.narrow(1, seq_len - 1, 1)}, 1);
  bool equal = torch::equal(got, kept);
  for (int64_t i = 0; i < batch && equal; ++i) {
    const uint64_t sample = data.sample_at(0, static_cast<uint64_t>(resume_step * batch + i));
    const std::vector<int64_t> want = peers_sample_tokens(dir, m, sample, seq_len);
    equal = std::memcmp(want.data(), got[i].contiguous().data_ptr<int64_t>(), want.size() * 8) == 0;
  }
  nlohmann::json out = {{"loader", "cohort"},
                        {"threads", "main + 1 read-ahead"},
                        {"page_cache", warm ? "warm" : "cold"},
                        {"samples", samples},
                        {"epoch_s", epoch_s},
                        {"samples_per_s", samples / epoch_s},
                        {"resume_step", resume_step},
                        {"resume_s", resume_s},
                        {"resume_parts_s", {{"build", build_s}, {"load_state", load_s}, {"first_batch", resume_s - build_s - load_s}}},
                        {"state_bytes", state.size()},
                        {"resumed_batch_ok", equal},
                        {"checksum", checksum}};
  std::cout << out.dump() << std::endl;
  return equal ? 0 : 1;
}
