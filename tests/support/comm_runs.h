// Short data-parallel trainings of SmallNet whose DDP options a test sets (communication hooks,
// the allreduce algorithm), for comparing how buckets are averaged. Test support.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "cohort/comm_hook.h"
#include "cohort/distributed_data_parallel.h"
#include "support/ddp_fixtures.h"
#include "support/thread_ranks.h"

namespace cohort::testing {

struct TrainRun {
  std::vector<std::vector<torch::Tensor>> params;  // per rank
  std::vector<DDPStats> stats;
};

// `steps` SGD steps of SmallNet(hidden) on `world` ranks, each rank its `rows`-row share of the
// same global batches, in small buckets; `configure` sets each rank's options (hooks are made per
// rank: they hold per-rank state).
inline TrainRun train_with(int world, int steps, int64_t rows, int hidden,
                           const std::function<void(DDPOptions&)>& configure, RankOptions ranks = {}) {
  const auto init = initial_parameters(3, hidden);
  const auto batches = make_batches(steps, world * rows, 5);
  TrainRun run;
  run.params.resize(world);
  run.stats.resize(world);
  run_ranks(
      world,
      [&](std::shared_ptr<Context> ctx) {
        const int r = ctx->rank();
        SmallNet net(hidden);
        load_parameters(*net, init);
        DDPOptions opt;
        opt.bucket_cap_mb = 0.004;  // several buckets
        opt.first_bucket_cap_mb = 0.001;
        if (configure) configure(opt);
        auto model = DistributedDataParallel(net, ctx, opt);
        torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
        for (const auto& b : batches) {
          sgd.zero_grad();
          torch::nll_loss(model->forward(b.x.narrow(0, r * rows, rows)), b.y.narrow(0, r * rows, rows)).backward();
          sgd.step();
        }
        run.params[r] = snapshot(*model->module());
        run.stats[r] = model->stats();
      },
      ranks);
  return run;
}

// The same with a hook (null: the built-in allreduce), flat over Gloo or shared memory.
inline TrainRun train(int world, int steps, int64_t rows, int hidden,
                      const std::function<std::shared_ptr<CommHook>()>& hook, bool same_machine = false) {
  RankOptions ranks;
  ranks.same_machine = same_machine;
  return train_with(
      world, steps, rows, hidden, [&](DDPOptions& o) { if (hook) o.comm_hook = hook(); }, ranks);
}

inline void expect_ranks_bitwise_equal(const TrainRun& run) {
  for (size_t r = 1; r < run.params.size(); ++r) {
    for (size_t i = 0; i < run.params[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(run.params[r][i], run.params[0][i])) << "rank " << r << " tensor " << i;
    }
  }
}

}  // namespace cohort::testing
