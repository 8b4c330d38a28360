// Node 0's agent hosting the workers' store. See store_host.h.
#include "launcher/recovery/store_host.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "cohort/error.h"
#include "launcher/config/elastic_options.h"
#include "launcher/io/waiting.h"
#include "launcher/workers/spawn.h"
#include "launcher/workers/worker_env.h"

namespace cohort::launcher {
namespace {

// Reads what the pipe has now (non-blocking); false at end-of-file.
bool read_some(int fd, std::string& into) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
      continue;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
  }
}

// cohort-store's own line about why it could not host ("cohort-store: could not ..."), without
// the c10d log lines around it.
std::string reason_in(const std::string& err) {
  const auto at = err.rfind("cohort-store: ");
  std::string line = at == std::string::npos ? err : err.substr(at + 14);
  line = line.substr(0, line.find('\n'));
  return line.empty() ? "it ended without saying why" : line;
}

}  // namespace

bool agent_hosts_store(const RunOptions& o) { return o.keep_survivors && o.nnodes > 1 && !is_elastic(o); }

void StoreHost::start(const std::string& addr, int port, double timeout_s) {
  stop();
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string program = (self.parent_path() / "cohort-store").string();
  if (ec || ::access(program.c_str(), X_OK) != 0) {
    throw ConfigError(-1, "--keep-survivors on several nodes needs cohort-store next to cohort (" + program +
                              " is missing; it is built and installed with cohort)");
  }
  const SpawnedProcess p = spawn_worker({program, addr, std::to_string(port)}, current_environment());
  pid_ = p.pid;
  std::string out, err;
  bool open_out = true, open_err = true;
  const auto deadline = deadline_in(timeout_s);
  while (out.find("listening\n") == std::string::npos) {
    if (!open_out || ms_left(deadline) == 0) {
      while (open_err) {  // the rest of what it said, then why it ended
        pollfd f{p.stderr_fd, POLLIN, 0};
        ::poll(&f, 1, 1000);
        open_err = read_some(p.stderr_fd, err) && (f.revents & POLLIN);
      }
      ::close(p.stdout_fd);
      ::close(p.stderr_fd);
      const bool ended = !open_out;
      stop();
      throw ConfigError(-1, "node 0 could not host the workers' store at " + addr + ":" + std::to_string(port) + ": " +
                                (ended ? reason_in(err) : "cohort-store did not listen within " +
                                                              std::to_string(static_cast<int>(timeout_s)) + " s"));
    }
    pollfd fds[2] = {{p.stdout_fd, POLLIN, 0}, {p.stderr_fd, POLLIN, 0}};
    ::poll(fds, 2, std::min(ms_left(deadline), 100));
    open_out = read_some(p.stdout_fd, out);
    if (open_err) open_err = read_some(p.stderr_fd, err);
  }
  ::close(p.stdout_fd);  // it writes nothing more (store_host_main.cpp)
  ::close(p.stderr_fd);
}

void StoreHost::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

}  // namespace cohort::launcher
