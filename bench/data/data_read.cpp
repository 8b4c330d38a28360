// bench/data/data_read.cpp — how fast ShardedDataset reads cold local shards against `dd` on the
// same files in the same run, its peak and sampled RSS while it reads, and how long a resume deep
// into an epoch takes. One JSON line. Run through bench/data/data_read.sh (docs/BENCHMARKS.md).
//
// "Cold": each file's pages are dropped from the page cache (fdatasync, then
// posix_fadvise(DONTNEED)) before each reader, so both read from the disk. The dataset reads in
// its shuffled global order (blocks of 4096 samples), converts the tokens to int64 tensors and
// reads ahead on its thread; dd reads each shard sequentially in 8 MiB blocks.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_token_set.h"
#include "cohort/sharded_dataset.h"
#include "data/shards/manifest.h"
#include "data/prepare/shard_writer.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field) + 1));
  }
  return -1;
}



}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ShardedDataset against dd on cold local shards"};
  std::string dir;
  double gib = 1;
  int64_t seq_len = 1024, global_batch = 64;
  app.add_option("--dir", dir, "the data set (generated there when it has no manifest)")->required();
  app.add_option("--gib", gib, "size to generate, GiB")->capture_default_str();
  app.add_option("--seq-len", seq_len)->capture_default_str();
  app.add_option("--global-batch", global_batch)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!std::filesystem::exists(dir + "/manifest.json")) bench_data::generate_token_set(dir, static_cast<uint64_t>(gib * (1ull << 30)), 256ull << 20, 1);
  const cohort::data::Manifest m = cohort::data::read_manifest(dir);
  uint64_t bytes = 0;
  for (const auto& s : m.shards) bytes += s.data.bytes;

  for (const auto& s : m.shards) bench_data::evict_from_page_cache(dir + "/" + s.data.file);
  auto t = Clock::now();
  for (const auto& s : m.shards) {
    const std::string cmd = "dd if=" + dir + "/" + s.data.file + " of=/dev/null bs=8M status=none";
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  const double dd_s = seconds_since(t);

  for (const auto& s : m.shards) bench_data::evict_from_page_cache(dir + "/" + s.data.file);
  cohort::ShardedDatasetOptions o;
  o.seq_len = seq_len;
  o.global_batch = global_batch;
  o.seed = 1;
  const long rss_before = status_kib("VmRSS:");
  cohort::ShardedDataset data(dir, 0, 1, o);
  std::vector<long> rss;  // sampled at each tenth of the epoch
  const int64_t steps = data.steps_per_epoch();
  t = Clock::now();
  int64_t checksum = 0;
  for (int64_t step = 0; step < steps; ++step) {
    auto b = data.get_batch(static_cast<size_t>(global_batch));
    checksum += b->data[0][0].item<int64_t>();
    if (step % std::max<int64_t>(1, steps / 10) == 0) rss.push_back(status_kib("VmRSS:"));
  }
  const double loader_s = seconds_since(t);
  const uint64_t loader_bytes = static_cast<uint64_t>(steps * global_batch * (seq_len + 1) * 2);

  // A resume 90 % into the epoch: construct, load the state, first batch.
  const std::string state = [&] {
    cohort::ShardedDatasetState s = data.state();
    s.position = (steps * 9 / 10) * global_batch;
    s.epoch = 0;
    return s.to_json();
  }();
  t = Clock::now();
  cohort::ShardedDataset resumed(dir, 0, 1, o);
  resumed.load_state_dict(state);
  auto first = resumed.get_batch(static_cast<size_t>(global_batch));
  const double resume_s = seconds_since(t);

  nlohmann::json out = {{"bench", "data_read"}, {"bytes", bytes}, {"shards", m.shards.size()},
                        {"dd_MBps", bytes / dd_s / 1e6}, {"loader_MBps", loader_bytes / loader_s / 1e6},
                        {"loader_vs_dd", (loader_bytes / loader_s) / (bytes / dd_s)},
                        {"rss_before_MiB", rss_before / 1024.0}, {"peak_rss_MiB", status_kib("VmHWM:") / 1024.0},
                        {"rss_samples_MiB", nlohmann::json::array()}, {"resume_90pct_s", resume_s},
                        {"state_bytes", state.size()}, {"checksum", checksum + (first ? 1 : 0)}};
  for (long r : rss) out["rss_samples_MiB"].push_back(r / 1024.0);
  std::cout << out.dump() << std::endl;
  return 0;
}
