// allreduce_sizes: how long DDP takes to average one bucket of each size with the flat and with
// the hierarchical allreduce (bench/allreduce_sizes.sh, issue 18: where the automatic choice
// should take which). Run under `cohort run` on several nodes with several ranks each. Each
// size: a module of one parameter of that many bytes, wrapped twice (DDPOptions::allreduce flat
// and hierarchical, one bucket each); forward + backward, which is all allreduce here, timed per
// call on rank 0, the two interleaved. Prints one JSON line per size on rank 0.
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>

namespace {

struct OneParameterImpl : torch::nn::Module {
  explicit OneParameterImpl(int64_t n) : w(register_parameter("w", torch::zeros({n}))) {}
  torch::Tensor forward() { return w.sum(); }
  torch::Tensor w;
};
TORCH_MODULE(OneParameter);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DDP's flat and hierarchical allreduce, per bucket size"};
  int64_t min_bytes = 4096, max_bytes = 16 << 20;
  int iterations = 15;
  app.add_option("--min-bytes", min_bytes)->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--max-bytes", max_bytes)->check(CLI::Range(int64_t{4}, int64_t{1} << 32));
  app.add_option("--iterations", iterations)->check(CLI::Range(3, 1000));
  CLI11_PARSE(app, argc, argv);
  auto ctx = cohort::init();
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    std::vector<double> times[2];
    std::vector<cohort::DistributedDataParallel<OneParameter>> models;
    for (auto algo : {cohort::AllreduceAlgo::flat, cohort::AllreduceAlgo::hierarchical}) {
      cohort::DDPOptions o;
      o.allreduce = algo;
      o.bucket_cap_mb = o.first_bucket_cap_mb = 2.0 * static_cast<double>(bytes) / (1 << 20);  // one bucket
      models.push_back(cohort::DistributedDataParallel(OneParameter(bytes / 4), ctx, o));
    }
    for (int i = 0; i < iterations + 3; ++i) {
      for (int m = 0; m < 2; ++m) {
        const auto start = std::chrono::steady_clock::now();
        models[m]->forward().backward();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        if (i >= 3) times[m].push_back(ms);  // the first calls warm up buffers and connections
      }
    }
    if (ctx->rank() == 0) {
      const double flat = median(times[0]), hier = median(times[1]);
      std::cout << nlohmann::json{{"bytes", bytes}, {"flat_ms", flat}, {"hierarchical_ms", hier},
                                  {"hierarchical_speedup", flat / hier}, {"world_size", ctx->world_size()}}
                       .dump()
                << std::endl;
    }
  }
  return 0;
}
