// cohort-store ADDR PORT: hosts the workers' c10d TCPStore for one round of a job on several machines
// whose workers may be replaced one at a time (`cohort run --keep-survivors`).
//
// Normally rank 0's worker hosts the store, so the store dies with it and every other rank loses
// its way to the replacement. With --keep-survivors node 0's agent starts this process instead (next
// to the `cohort` binary, built against the same libtorch as the workers: the stores of libtorch
// 1.x and 2.x do not talk) and gives every worker COHORT_STORE_HOSTED=1 — as torchrun's agent hosts
// the store its workers share. Prints "listening" on stdout once the store accepts connections;
// ends on SIGTERM or SIGINT, or with the agent (PR_SET_PDEATHSIG from the agent's spawn).
// Exit 2 with one line on stderr when the store cannot be hosted; once it listens, stdout and stderr
// go to /dev/null.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/net/net_util.h"
#include "runtime/torch_compat_internal.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cohort-store ADDR PORT (started by cohort run --keep-survivors on several nodes)\n";
    return 2;
  }
  const std::string addr = argv[1];
  const int port = std::atoi(argv[2]);
  const std::string where = addr + ":" + std::to_string(port);
  if (port <= 0 || port > 65535) {
    std::cerr << "cohort-store: '" << argv[2] << "' is not a TCP port\n";
    return 2;
  }
  // Blocked before the store's threads start, so that they inherit the mask and sigwait() below
  // is the only place these signals arrive.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = true;
  opts.waitWorkers = false;
#if COHORT_TCPSTORE_TAKES_LISTEN_FD
  std::string problem;
  const int fd = cohort::detail::listen_on(addr, port, SOMAXCONN, &problem);
  if (fd < 0) {
    std::cerr << "cohort-store: could not host the store at " << where << " (" << problem << ")\n";
    return 2;
  }
  opts.masterListenFd = fd;  // listens on the master address only (docs/security.md)
#endif
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(addr, opts);
  } catch (const std::exception& e) {
    std::string cause = e.what();
    std::cerr << "cohort-store: could not host the store at " << where << " (" << cause.substr(0, cause.find('\n'))
              << ")\n";
    return 2;
  }
  std::cout << "listening" << std::endl;
  // From here the agent reads nothing of ours: c10d's notes about workers that went away (expected
  // when one is replaced) go nowhere, rather than into a pipe that would fill and block the store.
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull >= 0) {
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::close(devnull);
  }
  int sig = 0;
  sigwait(&stop, &sig);
  return 0;
}
