// Test helper: joins the job from the environment with cohort::init(), takes part in one
// allreduce, prints "rank R world W local L source S sum X" and exits 0; on a cohort error it
// prints the message to stderr and exits 2. INIT_PROBE_DEVICE=cuda: the allreduce is of a tensor
// on ctx->device(kCUDA), and the line ends with " device cuda:N".
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

int main() {
  try {
    auto ctx = cohort::init();
    const char* want = std::getenv("INIT_PROBE_DEVICE");
    const auto device = ctx->device(want && std::strcmp(want, "cuda") == 0 ? torch::kCUDA : torch::kCPU);
    std::vector<torch::Tensor> t{torch::ones({1}, device)};
    ctx->group(device)->allreduce(t)->wait();
    std::cout << "rank " << ctx->rank() << " world " << ctx->world_size() << " local " << ctx->local_rank()
              << " source " << ctx->env().source << " sum " << t[0].item<float>()
              << (device.is_cuda() ? " device " + device.str() : std::string()) << std::endl;
    ctx->barrier();
    return 0;
  } catch (const cohort::Error& e) {
    std::cerr << std::string(e.what()) + "\n" << std::flush;  // one write: ranks share the pipe
    return 2;
  }
}
