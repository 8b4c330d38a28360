// fashion_mnist: trains a CNN (or an MLP) on Fashion-MNIST with cohort's DistributedSampler and
// DistributedDataParallel. Run it on several ranks with torchrun-style variables, e.g.
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./fashion_mnist &
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./fashion_mnist
// It ends with one JSON line per rank: test_accuracy, samples_per_s (whole job, after the warm-up
// steps, evaluation excluded), world_size, steps, final_loss and param_checksum.
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fashion_mnist_data.h"
#include "models.h"

namespace {

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  int epochs = 5;
  int64_t max_steps = 0;  // 0: no limit
  int batch_size = 64;    // per rank
  double lr = 0.02;
  double momentum = 0.9;
  uint64_t seed = 0;
  int threads = 0;        // 0: COHORT_THREADS, else cores / local ranks
  int warmup_steps = 10;
  double bucket_cap_mb = 25;
  bool reference = false;
  bool no_eval = false;
  int log_every = 100;
};

double evaluate(torch::nn::Module& net, const std::function<torch::Tensor(torch::Tensor)>& forward,
                const FashionMnist& test) {
  torch::NoGradGuard no_grad;
  net.eval();
  int64_t correct = 0;
  const int64_t n = test.images().size(0);
  for (int64_t i = 0; i < n; i += 1000) {
    auto x = test.images().narrow(0, i, std::min<int64_t>(1000, n - i));
    auto y = test.labels().narrow(0, i, x.size(0));
    correct += forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  net.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

template <typename Net>
int train(const Flags& flags, Net net) {
  auto ctx = cohort::init();
  const int rank = ctx->rank();
  int threads = flags.threads;
  if (threads <= 0 && !std::getenv("COHORT_THREADS")) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ctx->local_world_size());
  }
  if (threads > 0) torch::set_num_threads(threads);

  FashionMnist train_set(flags.data, /*train=*/true, rank);
  FashionMnist test_set(flags.data, /*train=*/false, rank);

  cohort::DDPOptions ddp_options;
  ddp_options.bucket_cap_mb = flags.bucket_cap_mb;
  ddp_options.reference_mode = flags.reference;
  auto model = cohort::DistributedDataParallel(net, ctx, ddp_options);

  cohort::DistributedSampler sampler(train_set.size().value(), *ctx, {.shuffle = true, .seed = flags.seed});
  auto loader = torch::data::make_data_loader(train_set, sampler, torch::data::DataLoaderOptions(flags.batch_size));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(flags.lr).momentum(flags.momentum));

  using clock = std::chrono::steady_clock;
  int64_t step = 0, timed_steps = 0;
  clock::time_point timer_start;
  double timed_seconds = 0, last_loss = 0;
  bool done = false;
  for (int epoch = static_cast<int>(sampler.epoch()); epoch < flags.epochs && !done; ++epoch) {
    sampler.set_epoch(epoch);
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();  // gradients are averaged across ranks here
      optimizer.step();
      last_loss = loss.template item<double>();
      ++step;
      if (step == flags.warmup_steps) timer_start = clock::now();
      if (step > flags.warmup_steps) ++timed_steps;
      if (rank == 0 && flags.log_every > 0 && step % flags.log_every == 0) {
        std::cout << "epoch " << epoch << " step " << step << " loss " << last_loss << std::endl;
      }
      if (flags.max_steps > 0 && step >= flags.max_steps) {
        done = true;
        break;
      }
    }
  }
  if (timed_steps > 0) timed_seconds = std::chrono::duration<double>(clock::now() - timer_start).count();

  double accuracy = -1;
  if (!flags.no_eval) {
    accuracy = evaluate(*model, [&](torch::Tensor x) { return model->module()->forward(x); }, test_set);
  }
  // The job's loss: the last step's loss averaged over ranks.
  std::vector<torch::Tensor> loss_t{torch::tensor({last_loss / ctx->world_size()}, torch::kDouble)};
  ctx->group()->allreduce(loss_t)->wait();
  model->assert_in_sync();

  nlohmann::json result = {
      {"rank", rank},
      {"world_size", ctx->world_size()},
      {"model", flags.model},
      {"steps", step},
      {"final_loss", loss_t[0].item<double>()},
      {"test_accuracy", accuracy},
      {"samples_per_s", timed_seconds > 0 ? static_cast<double>(timed_steps) * flags.batch_size * ctx->world_size() / timed_seconds : 0.0},
      {"param_checksum", cohort::parameters_checksum(*model)},
  };
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN or MLP on Fashion-MNIST with cohort (data parallel)"};
  Flags f;
  app.add_option("--data", f.data, "Directory with the (gzipped) IDX files")->capture_default_str();
  app.add_option("--model", f.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}))->capture_default_str();
  app.add_option("--epochs", f.epochs, "Epochs")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-steps", f.max_steps, "Stop after this many steps (0: no limit)")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", f.batch_size, "Batch size per rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", f.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--seed", f.seed, "Seed for the model and the sampler")->capture_default_str();
  app.add_option("--threads", f.threads, "Intra-op threads per rank (0: cores / local ranks)");
  app.add_option("--warmup-steps", f.warmup_steps, "Steps before the throughput timer starts")->capture_default_str();
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP bucket capacity in MiB")->capture_default_str();
  app.add_flag("--reference", f.reference, "DDP reference mode: one allreduce per gradient after backward");
  app.add_flag("--no-eval", f.no_eval, "Skip the test-set evaluation");
  app.add_option("--log-every", f.log_every, "Print the loss every N steps on rank 0 (0: never)");
  CLI11_PARSE(app, argc, argv);

  try {
    torch::manual_seed(f.seed);  // the same initial model on every rank (rank 0's is broadcast anyway)
    if (f.model == "mlp") return train(f, Mlp());
    return train(f, Cnn());
  } catch (const cohort::Error& e) {
    std::cerr << "fashion_mnist: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist: " << e.what() << std::endl;
    return 1;
  }
}
