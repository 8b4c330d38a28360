// Test helper: joins the job from the environment with cohort::init(), takes part in one
// allreduce, prints "rank R world W local L source S sum X" and exits 0; on a cohort error it
// prints the message to stderr and exits 2.
#include <cohort/cohort.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  try {
    auto ctx = cohort::init();
    std::vector<torch::Tensor> t{torch::ones({1})};
    ctx->group()->allreduce(t)->wait();
    std::cout << "rank " << ctx->rank() << " world " << ctx->world_size() << " local " << ctx->local_rank()
              << " source " << ctx->env().source << " sum " << t[0].item<float>() << std::endl;
    ctx->barrier();
    return 0;
  } catch (const cohort::Error& e) {
    std::cerr << e.what() << std::endl;
    return 2;
  }
}
