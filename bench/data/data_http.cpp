// bench/data/data_http.cpp — ShardedDataset reading a data set over HTTP from a real nginx
// against `curl` reading the same shard files from the same server, in the same run, in
// interleaved rounds. One JSON line. Run through bench/data/data_http.sh (docs/BENCHMARKS.md).
//
// Each round: `curl` fetches every shard in one process (one kept-alive connection), once into
// /dev/null and once into files in a folder on the cache's disk; then the loader, from an empty
// cache folder, opens the URL (manifest, indexes) and reads one epoch in its shuffled order
// (seq_len 1024, global batch 64, world size 1, int64 tensors out), fetching every shard once
// through its cache (whole shards by Range requests, checked against the manifest's XXH3,
// written under a temporary name and renamed) with its prefetch thread. The server's files are
// read once before the rounds, so every reader is served from nginx's page cache: what is
// measured is HTTP and the client, not the server's disk. Two more columns say where the time
// goes: the same epoch again from the warm cache (the loader alone), and the fetches alone (every
// shard fetched and checked into an empty cache, one after the other, no reading).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_token_set.h"
#include "cohort/sharded_dataset.h"
#include "data/prepare/shard_writer.h"
#include "data/shards/manifest.h"
#include "data/shards/shard_set.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }


double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ShardedDataset over HTTP against curl from the same nginx"};
  std::string root, url, cache;
  double gib = 1;
  int shard_mib = 64, rounds = 3;
  int64_t seq_len = 1024, global_batch = 64;
  app.add_option("--root", root, "the server's root: the data set is ROOT/set (generated when missing)")->required();
  app.add_option("--url", url, "the server's URL for ROOT (http://127.0.0.1:PORT/)")->required();
  app.add_option("--cache", cache, "the cache folder (emptied before each loader run)")->required();
  app.add_option("--gib", gib, "size to generate, GiB")->capture_default_str();
  app.add_option("--shard-mib", shard_mib, "shard size to generate, MiB")->capture_default_str();
  app.add_option("--rounds", rounds)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const std::string dir = root + "/set";
  if (!std::filesystem::exists(dir + "/manifest.json")) {
    bench_data::generate_token_set(dir, static_cast<uint64_t>(gib * (1ull << 30)), static_cast<uint64_t>(shard_mib) << 20, 1);
  }
  const cohort::data::Manifest m = cohort::data::read_manifest(dir);
  uint64_t bytes = 0;
  std::string to_null = "curl -sf", to_files = "curl -sf --output-dir " + cache + "-curl";
  for (const auto& s : m.shards) {
    bytes += s.data.bytes;
    to_null += " -o /dev/null " + url + "set/" + s.data.file;
    to_files += " -O " + url + "set/" + s.data.file;
  }
  if (std::system(("cat " + dir + "/*.bin > /dev/null").c_str()) != 0) return 1;  // the server's page cache

  std::vector<double> curl_null, curl_files, loader, loader_warm, fetch_only, local;
  int64_t checksum = 0;
  for (int round = 0; round < rounds; ++round) {
    auto t = Clock::now();
    if (std::system(to_null.c_str()) != 0) return 1;
    curl_null.push_back(bytes / seconds_since(t) / 1e6);

    std::filesystem::remove_all(cache + "-curl");
    std::filesystem::create_directories(cache + "-curl");
    t = Clock::now();
    if (std::system(to_files.c_str()) != 0) return 1;
    curl_files.push_back(bytes / seconds_since(t) / 1e6);
    std::filesystem::remove_all(cache + "-curl");

    std::filesystem::remove_all(cache);
    cohort::ShardedDatasetOptions o;
    o.seq_len = seq_len;
    o.global_batch = global_batch;
    o.seed = static_cast<uint64_t>(round);
    o.cache_dir = cache;
    t = Clock::now();
    cohort::ShardedDataset data(url + "set/", 0, 1, o);
    while (auto b = data.get_batch(static_cast<size_t>(global_batch))) checksum += b->data[0][0].item<int64_t>();
    loader.push_back(bytes / seconds_since(t) / 1e6);
    // The same epoch again from the warm cache: the loader's own rate, no network.
    data.reset();
    t = Clock::now();
    while (auto b = data.get_batch(static_cast<size_t>(global_batch))) checksum += b->data[0][0].item<int64_t>();
    loader_warm.push_back(bytes / seconds_since(t) / 1e6);
    std::filesystem::remove_all(cache);
    // The server's own copy, read locally (from the page cache): the loader's ceiling here.
    {
      cohort::ShardedDatasetOptions lo = o;
      lo.cache_dir.clear();
      cohort::ShardedDataset d(dir, 0, 1, lo);
      t = Clock::now();
      while (auto b = d.get_batch(static_cast<size_t>(global_batch))) checksum += b->data[0][0].item<int64_t>();
      local.push_back(bytes / seconds_since(t) / 1e6);
    }
    // The fetches alone: every shard into an empty cache, one after the other (ShardSet::verify).
    cohort::data::RemoteOptions remote;
    remote.cache_dir = cache;
    t = Clock::now();
    cohort::data::ShardSet(url + "set/", 2, false, remote).verify();
    fetch_only.push_back(bytes / seconds_since(t) / 1e6);
    std::filesystem::remove_all(cache);
  }
  nlohmann::json out = {{"bench", "data_http"},
                        {"bytes", bytes},
                        {"shards", m.shards.size()},
                        {"rounds", rounds},
                        {"curl_null_MBps", curl_null},
                        {"curl_files_MBps", curl_files},
                        {"loader_MBps", loader},
                        {"loader_warm_cache_MBps", loader_warm},
                        {"fetch_only_MBps", fetch_only},
                        {"loader_local_copy_MBps", local},
                        {"loader_vs_curl_null", median(loader) / median(curl_null)},
                        {"loader_vs_curl_files", median(loader) / median(curl_files)},
                        {"checksum", checksum}};
  std::cout << out.dump() << std::endl;
  return 0;
}
