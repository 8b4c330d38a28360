// startup_probe: the trivial cohort program of the launcher start-up benchmark
// (bench/launcher/launcher_startup.sh). It joins the job (cohort::init: store + Gloo process group), waits
// at a barrier, prints the wall-clock time at which it got through, and exits. Nothing else.
#include <cohort/context.h>

#include <chrono>
#include <cstdio>

int main() {
  auto ctx = cohort::init();
  ctx->barrier();  // every rank has joined the process group once this returns
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::printf("joined %lld\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  std::fflush(stdout);
  return 0;
}
