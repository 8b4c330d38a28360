// Helpers for the launcher tests: run `cohort` as a real child process with captured output and a
// time limit, find free ports, read the pids workers wrote, and check the process table.
// Paths of the binaries come from CMake (COHORT_BIN, ENV_PROBE_BIN, FASHION_MNIST_BIN).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/netns.h"
#include "support/files.h"
#include "support/subprocess.h"

namespace launcher_test {

// From tests/support: the same helpers as every other test folder's.
using cohort::testing::contains;
using cohort::testing::free_port;
using cohort::testing::slurp;
using cohort::testing::TempDir;

using clock = std::chrono::steady_clock;

struct Result {
  int status = -1;  // waitpid status
  bool timed_out = false;
  std::string out, err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

/// A child process with its stdout and stderr captured.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) std::abort();
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      dup2(out[1], 1);
      dup2(err[1], 2);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
    for (int fd : fds_) fcntl(fd, F_SETFL, O_NONBLOCK);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  pid_t pid() const { return pid_; }

  /// Collects output until the child exits or timeout_s passes (then SIGKILLs it).
  Result wait(double timeout_s) {
    const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (fds_[0] >= 0 || fds_[1] >= 0) {
      std::vector<pollfd> p;
      for (int fd : fds_) {
        if (fd >= 0) p.push_back({fd, POLLIN, 0});
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) {
        result_.timed_out = true;
        kill(pid_, SIGKILL);
        break;
      }
      poll(p.data(), p.size(), static_cast<int>(std::min<int64_t>(left, 100)));
      for (int s = 0; s < 2; ++s) read_some(s);
    }
    waitpid(pid_, &result_.status, 0);
    reaped_ = true;
    for (int s = 0; s < 2; ++s) read_some(s);
    return result_;
  }

 private:
  void read_some(int s) {
    if (fds_[s] < 0) return;
    char buf[65536];
    for (;;) {
      ssize_t n = read(fds_[s], buf, sizeof(buf));
      if (n > 0) {
        (s == 0 ? result_.out : result_.err).append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        close(fds_[s]);
        fds_[s] = -1;
      }
      return;  // end of file, or nothing more right now (EAGAIN)
    }
  }
  pid_t pid_ = -1;
  bool reaped_ = false;
  int fds_[2] = {-1, -1};
  Result result_;
};

inline Result run(const std::vector<std::string>& argv, double timeout_s, const std::vector<std::string>& env = {}) {
  Child c(argv, env);
  return c.wait(timeout_s);
}


/// Two consecutive free loopback ports (store, agents); returns the first.
inline int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    int p = free_port();
    if (p >= 65535) continue;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(p + 1));
    bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (ok) return p;
  }
  return free_port();
}

/// True when no such process exists, or it is a zombie (dead, waiting to be reaped — by an init
/// that may never reap it in a container).
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] == 'Z';
}

/// Waits until every pid is gone; returns false when some process still lives at the deadline.
inline bool all_gone_within(const std::vector<pid_t>& pids, double seconds) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  for (;;) {
    bool gone = true;
    for (pid_t p : pids) gone = gone && process_gone(p);
    if (gone) return true;
    if (clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The pids env_probe workers wrote to dir/rank<R>.pid, waiting up to timeout_s for all n.
inline std::vector<pid_t> wait_for_pids(const std::string& dir, int n, double timeout_s) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    std::vector<pid_t> pids;
    for (int r = 0; r < n; ++r) {
      std::ifstream f(dir + "/rank" + std::to_string(r) + ".pid");
      pid_t p = 0;
      if (f >> p && p > 0) pids.push_back(p);
    }
    if (static_cast<int>(pids.size()) == n || clock::now() > deadline) return pids;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) out.push_back(line);
  return out;
}

/// Whether this machine has iproute2's `ip`: its path, else "" (the network-namespace tests skip).
inline std::string find_ip() { return cohort::testing::find_ip_tool(); }

/// Runs `cmd` with /bin/sh, its output discarded; its exit status as std::system returns it.
inline int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

}  // namespace launcher_test
