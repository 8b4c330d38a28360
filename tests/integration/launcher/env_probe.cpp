// env_probe: a tiny worker for the launcher tests (no torch, starts in a millisecond).
// It prints the job variables it was given ("ENV NAME=VALUE"), writes its pid to
// $PROBE_DIR/rank<R>.pid (so tests can check the process table), then does what its flags say:
//   --exit R:C       rank R exits with code C after --delay ms
//   --kill R         rank R kills itself with SIGKILL after --delay ms
//   --lines N        print N long lines, each in two write()s with a pause between (relay test)
//   --ignore-term    ignore SIGTERM (the launcher must escalate to SIGKILL)
//   --sleep S        then sleep S seconds (default 0) and exit 0
//   --blas           load libopenblas.so.0 as libtorch would and print "BLAS CORE=<its kernels>"
//   --until-restart N  the flags above apply only while COHORT_RESTART_COUNT < N; from the Nth
//                      restart on the probe prints, writes its pid and exits 0 (restart tests)
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  const char* rank_env = std::getenv("COHORT_RANK");
  const int rank = rank_env ? std::atoi(rank_env) : -1;
  int exit_rank = -1, exit_code = 0, kill_rank = -1, lines = 0, delay_ms = 300;
  double sleep_s = 0;
  int until_restart = -1;
  bool blas = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--exit") {
      std::string v = next();
      exit_rank = std::atoi(v.c_str());
      exit_code = std::atoi(v.substr(v.find(':') + 1).c_str());
    } else if (a == "--kill") {
      kill_rank = std::atoi(next().c_str());
    } else if (a == "--lines") {
      lines = std::atoi(next().c_str());
    } else if (a == "--delay") {
      delay_ms = std::atoi(next().c_str());
    } else if (a == "--sleep") {
      sleep_s = std::atof(next().c_str());
    } else if (a == "--until-restart") {
      until_restart = std::atoi(next().c_str());
    } else if (a == "--blas") {
      blas = true;
    } else if (a == "--ignore-term") {
      signal(SIGTERM, SIG_IGN);
    }
  }
  for (const char* name :
       {"COHORT_RANK", "COHORT_WORLD_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_WORLD_SIZE", "COHORT_NODE_RANK",
        "COHORT_MASTER_ADDR", "COHORT_MASTER_PORT", "COHORT_RESTART_COUNT", "COHORT_THREADS", "RANK", "WORLD_SIZE",
        "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE"}) {
    const char* v = std::getenv(name);
    std::printf("ENV %s=%s\n", name, v ? v : "<unset>");
  }
  if (blas) {
    const char* core = "<none>";
    if (void* lib = dlopen("libopenblas.so.0", RTLD_NOW))
      if (auto fn = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"))) core = fn();
    std::printf("BLAS CORE=%s\n", core);
  }
  std::fflush(stdout);
  if (const char* dir = std::getenv("PROBE_DIR")) {
    std::string path = std::string(dir) + "/rank" + std::to_string(rank) + ".pid";
    std::string tmp = path + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%d\n", static_cast<int>(getpid()));
      std::fclose(f);
      std::rename(tmp.c_str(), path.c_str());
    }
  }
  const char* restart_env = std::getenv("COHORT_RESTART_COUNT");
  if (until_restart >= 0 && restart_env && std::atoi(restart_env) >= until_restart) return 0;
  for (int i = 0; i < lines; ++i) {
    // Two writes per line with a pause between: a relay that forwards bytes as they come would
    // let another rank's line land in the middle.
    std::string head = "line " + std::to_string(i) + " of rank " + std::to_string(rank) + " ";
    std::string tail = std::string(200, 'a' + rank % 26) + " end\n";
    ssize_t r1 = write(1, head.data(), head.size());
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ssize_t r2 = write(1, tail.data(), tail.size());
    (void)r1;
    (void)r2;
  }
  if (rank == exit_rank || rank == kill_rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    std::printf("rank %d giving up now\n", rank);
    std::fflush(stdout);
    if (rank == kill_rank) raise(SIGKILL);
    return exit_code;
  }
  if (sleep_s > 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(sleep_s * 1000));
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}
