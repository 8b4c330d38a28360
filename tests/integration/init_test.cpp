// cohort::init() in real processes: joining through each family of variables, a world of one,
// and the errors for a half-set environment, an unreachable store and a port in use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <unistd.h>

#include "support/subprocess.h"

namespace {

using namespace cohort::testing;  // run_shell, contains, free_port, ... (support/subprocess.h)

const std::string kProbe = COHORT_INIT_PROBE;

// Starts `world` probes in the background with the variables `vars(rank)` and waits for all.
cohort::testing::Run run_job(int world, const std::function<std::string(int)>& vars) {
  std::string cmd;
  for (int r = 0; r < world; ++r) cmd += "env " + vars(r) + " timeout 60 " + kProbe + " & ";
  cmd += "wait";
  return run_shell(cmd);
}

TEST(Init, WithoutVariablesIsAWorldOfOne) {
  auto r = run_shell("env -i " + kProbe);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0 world 1 local 0 source none sum 1")) << r.output;
}

// OpenBLAS that does not know the CPU runs generic kernels; init() says how to start instead
// (runtime/host/blas_core.h), and the advice works. On a CPU OpenBLAS knows, init() only names its kernels.
TEST(Init, SaysHowToStartWithOpenBlasKernelsForThisCpu) {
  const std::string info = "env -i COHORT_LOG_LEVEL=info ";
  auto r = run_shell(info + kProbe);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch advice;
  if (std::regex_search(r.output, advice,
                        std::regex("OpenBLAS does not know this CPU and runs its generic Prescott kernels.*"
                                   "Start the workers with OPENBLAS_CORETYPE=([A-Za-z]+)"))) {
    const std::string core = advice[1];
    EXPECT_NE(core, "Prescott");
    auto fixed = run_shell(info + "OPENBLAS_CORETYPE=" + core + " " + kProbe);
    EXPECT_EQ(fixed.exit_code, 0) << fixed.output;
    EXPECT_TRUE(contains(fixed.output, "OpenBLAS runs its " + core + " kernels (OPENBLAS_CORETYPE=" + core + ")"))
        << fixed.output;
    EXPECT_FALSE(contains(fixed.output, "does not know this CPU")) << fixed.output;
  } else if (!std::regex_search(r.output, std::regex("OpenBLAS runs its [A-Za-z0-9]+ kernels"))) {
    // PyTorch's wheels bring their own BLAS (MKL, linked in): no OpenBLAS to advise on.
    const auto ldd = run_shell("ldd " + kProbe);
    ASSERT_FALSE(contains(ldd.output, "openblas")) << "OpenBLAS is loaded but init() named no kernels:\n"
                                                   << r.output << ldd.output;
    GTEST_SKIP() << "this libtorch loads no OpenBLAS (PyTorch's wheels link MKL)";
  }
  // The user's own choice is not argued with, even the generic one.
  auto own = run_shell("env -i OPENBLAS_CORETYPE=Prescott " + kProbe);
  EXPECT_EQ(own.exit_code, 0) << own.output;
  EXPECT_FALSE(contains(own.output, "does not know this CPU")) << own.output;
}

TEST(Init, TorchrunVariablesJoinTwoProcesses) {
  const int port = free_port();
  auto r = run_job(2, [&](int rank) {
    return "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port);
  });
  EXPECT_TRUE(contains(r.output, "rank 0 world 2 local 0 source torchrun sum 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 world 2 local 1 source torchrun sum 2")) << r.output;
}

TEST(Init, CohortVariablesJoinThreeProcesses) {
  const int port = free_port();
  auto r = run_job(3, [&](int rank) {
    return "COHORT_RANK=" + std::to_string(rank) + " COHORT_WORLD_SIZE=3 COHORT_MASTER_PORT=" + std::to_string(port) +
           " RANK=9 WORLD_SIZE=10";  // ignored: cohort's own variables come first
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(contains(r.output, "rank " + std::to_string(rank) + " world 3 local " + std::to_string(rank) +
                                       " source cohort sum 3"))
        << r.output;
  }
}

TEST(Init, OpenMpiAndSlurmVariablesJoin) {
  const int port = free_port();
  auto r = run_job(2, [&](int rank) {
    return "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 MASTER_PORT=" +
           std::to_string(port);
  });
  EXPECT_TRUE(contains(r.output, "rank 1 world 2 local 0 source openmpi sum 2")) << r.output;
  const int port2 = free_port();
  r = run_job(2, [&](int rank) {
    return "SLURM_PROCID=" + std::to_string(rank) + " SLURM_NTASKS=2 SLURM_LOCALID=" + std::to_string(rank) +
           " MASTER_PORT=" + std::to_string(port2);
  });
  EXPECT_TRUE(contains(r.output, "rank 1 world 2 local 1 source slurm sum 2")) << r.output;
}

// Where this libtorch has no CUDA (Debian's 1.13) or this machine shows no GPU (a CUDA libtorch 2.x;
// CUDA_VISIBLE_DEVICES hides a GPU machine's): each rank says so in one line naming itself, and
// exits 2 before any collective.
TEST(Init, CudaWithoutCudaIsAOneLineErrorOnEveryRank) {
  const int port = free_port();
  auto r = run_job(2, [&](int rank) {
    return "-i CUDA_VISIBLE_DEVICES= INIT_PROBE_DEVICE=cuda RANK=" + std::to_string(rank) + " WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port);
  });
  const std::regex line("rank ([01]): CUDA tensors asked for, but (this machine has no CUDA device|this libtorch \\(.*\\) was built without CUDA and NCCL)[^\n]*\n");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), line), std::sregex_iterator()), 2)
      << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: CUDA")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: CUDA")) << r.output;
  std::istringstream lines(r.output);
  int other = 0;
  for (std::string l; std::getline(lines, l);) other += l.find("OpenBLAS") == std::string::npos;  // init()'s advice
  EXPECT_EQ(other, 2) << "one line per rank, nothing else:\n" << r.output;
  EXPECT_LT(r.seconds, 30);
}

// A rank built against another libtorch: here a Python process with torch (the same store
// protocol) joins the real TCPStore as rank 1 the way init() does, but records another libtorch.
// Rank 0 must stop with one line naming both, before any collective; the Python side reads rank 0's
// record, which must name this build's libtorch.
TEST(Init, RanksBuiltAgainstDifferentLibtorchsAreRefused) {
  const char* python = std::getenv("COHORT_PYTHON");
  if (!python || run_shell(std::string(python) + " -c 'import torch.distributed'").exit_code != 0) {
    GTEST_SKIP() << "no Python with torch.distributed at COHORT_PYTHON";
  }
  const int port = free_port();
  const std::string other = R"PY(
import sys, time, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False, timeout=__import__("datetime").timedelta(seconds=20))
store.set("cohort/init/libtorch/1", "libtorch 9.9.9 without CUDA")
store.add("cohort/init/joined", 1)
print("rank 0 records: " + store.get("cohort/init/libtorch/0").decode(), flush=True)
time.sleep(3)
)PY";
  auto r = run_shell("{ env -i RANK=0 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port) +
                     " COHORT_STORE_TIMEOUT_S=20 timeout 60 " + kProbe + " 2>&1; echo exit=$?; } & sleep 1; " +
                     python + " -c '" + other + "' " + std::to_string(port) + " 2>&1; wait");
  EXPECT_TRUE(contains(r.output, "exit=2")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("rank 0: rank 1 runs libtorch 9\\.9\\.9 without CUDA, this rank runs "
                                                     "libtorch [0-9.]+ (with CUDA and NCCL|without CUDA): every rank")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("rank 0 records: libtorch [0-9.]+ (with CUDA and NCCL|without CUDA)\\n")))
      << r.output;
  EXPECT_LT(r.seconds, 30);
}

TEST(Init, HalfSetEnvironmentIsAOneLineError) {
  auto r = run_shell("env -i RANK=1 " + kProbe);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "cohort: RANK is set but WORLD_SIZE is not\n");
}

TEST(Init, UnreachableStoreFailsWithinTheTimeout) {
  const int port = free_port();  // nobody listens there
  auto r = run_shell("env -i RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                     " COHORT_STORE_TIMEOUT_S=2 timeout 60 " + kProbe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: could not reach the store at 127.0.0.1:" + std::to_string(port) +
                                     " within 2 s"))
      << r.output;
  EXPECT_LT(r.seconds, 30) << "far beyond the 2 s store timeout";
}

TEST(Init, RankZeroAloneTimesOutWaitingForTheOthers) {
  const int port = free_port();
  auto r = run_shell("env -i RANK=0 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port) +
                     " COHORT_STORE_TIMEOUT_S=2 timeout 60 " + kProbe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: only 1 of the 2 ranks reached the store at 127.0.0.1:" +
                                     std::to_string(port) + " within 2 s"))
      << r.output;
  EXPECT_LT(r.seconds, 30);
}

TEST(Init, PortInUseIsNamed) {
  const int port = free_port();
  // A listener of our own holds the port while rank 0 tries to host the store there.
  auto r = run_shell("python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\"," + std::to_string(port) +
                     ")); s.listen(); time.sleep(30)' & holder=$!; sleep 1; env -i RANK=0 WORLD_SIZE=2 MASTER_PORT=" +
                     std::to_string(port) + " COHORT_STORE_TIMEOUT_S=2 timeout 60 " + kProbe + "; echo exit=$?; kill $holder");
  EXPECT_TRUE(contains(r.output, "exit=2")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: could not host the store on port " + std::to_string(port))) << r.output;
}

// Ranks on one machine can meet in a store file (COHORT_STORE_FILE) instead of the TCPStore: they
// join and reduce as before, and listen on no TCP port but loopback (Gloo's pairs).
TEST(Init, StoreFileJoinsProcessesWithoutOpeningAPort) {
  char dir[] = "/tmp/cohort_store_file_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/store";
  auto r = run_job(2, [&](int rank) {
    return "INIT_PROBE_LISTENERS=1 COHORT_RANK=" + std::to_string(rank) + " COHORT_WORLD_SIZE=2 COHORT_STORE_FILE=" + file;
  });
  for (int rank = 0; rank < 2; ++rank) {
    const std::string R = "rank " + std::to_string(rank);
    EXPECT_TRUE(contains(r.output, R + " world 2 local " + std::to_string(rank) + " source cohort sum 2")) << r.output;
    EXPECT_TRUE(contains(r.output, R + " store " + file)) << r.output;
  }
  std::smatch m;
  const std::regex wide(R"(listens on.* (?!127\.|::1:)[0-9a-f.:\[\]]+:\d+)");  // loopback aside
  EXPECT_FALSE(std::regex_search(r.output, m, wide)) << "a port beyond loopback: " << r.output;
  EXPECT_FALSE(std::ifstream(file).good()) << "the last rank to leave removes the store file";
  std::system(("rm -rf " + std::string(dir)).c_str());
}

// What `cohort run` does for a job on one machine (issue 22: the TCPStore listened on every
// interface, open to any process): its ranks meet in a store file in the agent's 0700 run
// directory, and nothing listens beyond loopback, on the master port least of all.
TEST(Init, AOneMachineJobUnderCohortRunOpensNoPortBeyondLoopback) {
  const int port = free_port();
  auto r = run_shell("INIT_PROBE_LISTENERS=1 timeout 120 " + kCohort + " run --nproc-per-node 2 --master-port " +
                     std::to_string(port) + " -- " + kProbe);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::regex store(R"(rank (\d) store (/\S+)/store-0 in a directory of mode 700)");
  int stores = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), store), end; it != end; ++it) ++stores;
  EXPECT_EQ(stores, 2) << r.output;
  std::smatch m;
  const std::regex wide(R"(listens on.* (?!127\.|::1:)[0-9a-f.:\[\]]+:\d+)");  // loopback aside
  EXPECT_FALSE(std::regex_search(r.output, m, wide)) << "a port beyond loopback: " << r.output;
  EXPECT_FALSE(contains(r.output, ":" + std::to_string(port) + " ")) << r.output;
  EXPECT_FALSE(contains(r.output, ":" + std::to_string(port) + "\n")) << r.output;
}

// Ranks started by hand (or by torchrun) meet in the TCPStore; from libtorch 2.8 its server
// listens on MASTER_ADDR only (cohort hands it a socket bound there), not on every interface.
TEST(Init, TheTcpStoreListensOnTheMasterAddressOnly) {
  const int port = free_port();
  auto r = run_job(2, [&](int rank) {
    return "INIT_PROBE_LISTENERS=1 RANK=" + std::to_string(rank) + " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           std::to_string(port);
  });
  ASSERT_TRUE(contains(r.output, "rank 0 store tcp")) << r.output;
  std::smatch version;
  ASSERT_TRUE(std::regex_search(r.output, version, std::regex(R"(rank 0 libtorch (\d+)\.(\d+))"))) << r.output;
  const int major = std::stoi(version[1]), minor = std::stoi(version[2]);
  const std::string P = ":" + std::to_string(port);
  const bool everywhere = contains(r.output, "0.0.0.0" + P) || contains(r.output, "[::]" + P);
  if (major < 2 || (major == 2 && minor < 8)) {
    EXPECT_TRUE(everywhere) << r.output;  // what docs/security.md says
    GTEST_SKIP() << "libtorch " << major << "." << minor
                 << "'s TCPStore takes no listening socket: it binds every interface (docs/security.md)";
  }
  EXPECT_TRUE(contains(r.output, "127.0.0.1" + P)) << r.output;
  EXPECT_FALSE(everywhere) << r.output;
}

TEST(Init, StoreFileInAMissingDirectoryIsAOneLineError) {
  auto r = run_shell("env -i COHORT_RANK=0 COHORT_WORLD_SIZE=2 COHORT_STORE_FILE=/nonexistent/dir/store " + kProbe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: could not open the store file /nonexistent/dir/store (COHORT_STORE_FILE)"))
      << r.output;
}

// An address that does not resolve is one line at once (c10d's client would retry until the store
// timeout, printing a line per try). In a network namespace of its own (no route anywhere), so
// that the name lookup sends nothing off this machine.
TEST(Init, UnresolvableMasterAddressIsOneLine) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace (unshare -n)";
  auto r = run_shell("unshare -n env -i RANK=1 WORLD_SIZE=2 MASTER_ADDR=no-such-host.invalid MASTER_PORT=29999 "
                     "COHORT_STORE_TIMEOUT_S=20 timeout 60 " + kProbe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1: MASTER_ADDR 'no-such-host.invalid' does not resolve")) << r.output;
  EXPECT_LT(r.seconds, 20) << "within the store timeout";
}

TEST(Init, BadTimeoutValueIsNamed) {
  auto r = run_shell("env -i COHORT_STORE_TIMEOUT_S=soon " + kProbe);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.output, "rank 0: COHORT_STORE_TIMEOUT_S='soon' is not a positive number of seconds")) << r.output;
}

}  // namespace
