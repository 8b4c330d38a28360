// hang_probe: a cohort worker for the hang tests that trains nothing but behaves on command.
// Each step spins the CPU for --step-ms, passes a barrier (a recorded collective) and calls
// cohort::report_step(step). Flags:
//   --steps N          steps, then print "done rank R" and exit 0 (default 5)
//   --step-ms M        busy milliseconds per step (default 10)
//   --stall-rank R     rank R stops after reporting step --stall-at: it sleeps for good while its
//   --stall-at K       heartbeat thread goes on (a worker stuck in its own code; its peers wait in
//                      the next barrier). Only in round 0 (COHORT_RESTART_COUNT=0).
#include <cohort/cohort.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  int steps = 5, step_ms = 10, stall_rank = -1, stall_at = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (a == "--steps") steps = v;
    if (a == "--step-ms") step_ms = v;
    if (a == "--stall-rank") stall_rank = v;
    if (a == "--stall-at") stall_at = v;
  }
  try {
    auto ctx = cohort::init();
    const bool first_round = ctx->env().restart_count == 0;
    for (int step = 1; step <= steps; ++step) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(step_ms);
      volatile double x = 0;
      while (std::chrono::steady_clock::now() < until) x = x + 1;  // busy, not asleep
      ctx->barrier();
      cohort::report_step(step);
      if (first_round && ctx->rank() == stall_rank && step == stall_at) {
        std::cout << "rank " << ctx->rank() << " stalls after step " << step << std::endl;
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
    }
    std::cout << "done rank " << ctx->rank() << " steps " << steps << std::endl;
    return 0;
  } catch (const cohort::Error& e) {
    std::cerr << std::string(e.what()) + "\n" << std::flush;  // one write: ranks share the pipe
    return 2;
  }
}
