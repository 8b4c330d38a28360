// A downstream program: a small regression model trained with cohort's DDP on synthetic data,
// through cohort's public API only. Run under `cohort run --nproc-per-node 2 -- ./downstream_train`;
// every rank prints one JSON line: {"rank":..,"world_size":..,"steps":..,"first_loss":..,"loss":..,
// "param_checksum":".."} (scripts/check-downstream.sh checks that the ranks agree and learned).
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdio>
#include <vector>

namespace {

// y = x · w_true + noise, the same 512 samples on every rank (fixed seed).
struct Synthetic : torch::data::datasets::Dataset<Synthetic> {
  torch::Tensor x, y;
  Synthetic() {
    torch::manual_seed(1);
    x = torch::randn({512, 16});
    y = x.matmul(torch::linspace(-1, 1, 16).unsqueeze(1)) + 0.01 * torch::randn({512, 1});
  }
  torch::data::Example<> get(size_t i) override { return {x[i], y[i]}; }
  torch::optional<size_t> size() const override { return 512; }
};

}  // namespace

int main() {
  auto ctx = cohort::init();
  torch::manual_seed(0);
  auto model = cohort::DistributedDataParallel(torch::nn::Linear(16, 1), ctx);
  Synthetic data;
  cohort::SamplerOptions sampler_options;
  sampler_options.seed = 7;
  cohort::DistributedSampler sampler(*data.size(), ctx, sampler_options);
  auto loader = torch::data::make_data_loader(data.map(torch::data::transforms::Stack<>()), sampler,
                                              torch::data::DataLoaderOptions(32));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  int64_t steps = 0;
  double first_loss = -1, loss_value = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    sampler.set_epoch(epoch);
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      loss_value = loss.item<double>();
      if (first_loss < 0) first_loss = loss_value;
      ++steps;
    }
  }
  std::printf(
      "{\"rank\":%d,\"world_size\":%d,\"steps\":%lld,\"first_loss\":%.6f,\"loss\":%.6f,\"param_checksum\":\"%s\","
      "\"cohort\":\"%s\",\"libtorch\":\"%s\"}\n",
      ctx->rank(), ctx->world_size(), static_cast<long long>(steps), first_loss, loss_value,
      cohort::parameters_checksum(*model).c_str(), cohort::version(), cohort::torch_version());
  return 0;
}
