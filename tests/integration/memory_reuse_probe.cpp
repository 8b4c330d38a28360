// Test helper: counts the page faults of a training-step-like allocation pattern — 48 MiB of
// 4 MiB tensors written, then all freed — over four repetitions (after four to settle), first
// before and then after cohort::init() (a world of one). Prints "before F after G retained R",
// R being what init's call of cohort::retain_freed_memory() did (init repeats it; a second call
// returns the same answer).
#include <cohort/cohort.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <iostream>
#include <vector>

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

void step_like_allocations() {
  std::vector<torch::Tensor> live;
  for (int i = 0; i < 12; ++i) live.push_back(torch::empty({1 << 20}).fill_(1.0f));  // 4 MiB each
}

long faults_of_repeated_steps() {
  // glibc's heap settles into reusing the freed blocks over the first few repetitions.
  for (int i = 0; i < 4; ++i) step_like_allocations();
  const long start = minor_faults();
  for (int i = 0; i < 4; ++i) step_like_allocations();
  return minor_faults() - start;
}

}  // namespace

int main() {
  try {
    const long before = faults_of_repeated_steps();
    auto ctx = cohort::init();
    const long after = faults_of_repeated_steps();
    const bool retained = ctx->options().retain_freed_memory && cohort::retain_freed_memory();
    std::cout << "before " << before << " after " << after << " retained " << retained << std::endl;
    return 0;
  } catch (const cohort::Error& e) {
    std::cerr << std::string(e.what()) + "\n" << std::flush;  // one write: ranks share the pipe
    return 2;
  }
}
