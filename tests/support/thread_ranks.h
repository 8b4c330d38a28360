// Runs W ranks as threads of this process, each with its own Context (own Gloo process group)
// over one shared in-memory store — the fast way to test multi-rank logic (docs/ARCHITECTURE.md, Conventions).
#pragma once

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/context.h"

namespace cohort::testing {

struct RankOptions {
  /// Ranks declare one machine (local world = world), which turns on the shared-memory allreduce.
  bool same_machine = false;
  /// > 0: ranks declare nodes of this many ranks each (node-major), as `cohort run --nnodes`
  /// numbers them; each node's ranks share memory, the nodes only the Gloo group.
  int ranks_per_node = 0;
  /// > 0: the ranks join a running job, as a replacement under `cohort run --keep-survivors` does.
  int generation = 0;
  InitOptions init;
};

/// Calls fn(ctx) on `world` threads; returns each rank's exception (nullptr where none).
inline std::vector<std::exception_ptr> run_ranks_collect(int world, const std::function<void(std::shared_ptr<Context>)>& fn,
                                                         RankOptions rank_options = {}) {
  static std::atomic<int> job{0};
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string prefix = "job" + std::to_string(job++);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        JobEnv env;
        env.rank = r;
        env.world_size = world;
        env.generation = rank_options.generation;
        if (rank_options.same_machine) {
          env.local_rank = r;
          env.local_world_size = world;
        } else if (rank_options.ranks_per_node > 0) {
          env.local_rank = r % rank_options.ranks_per_node;
          env.local_world_size = rank_options.ranks_per_node;
          env.node_rank = r / rank_options.ranks_per_node;
        }
        InitOptions options = rank_options.init;
        auto ctx = std::make_shared<Context>(env, c10::make_intrusive<c10d::PrefixStore>(prefix, store), options);
        fn(ctx);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

/// Like run_ranks_collect, but rethrows the first rank's exception.
inline void run_ranks(int world, const std::function<void(std::shared_ptr<Context>)>& fn, RankOptions options = {}) {
  for (auto& e : run_ranks_collect(world, fn, options)) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace cohort::testing
