// A released warm spare forks its successor. See spare_fork.h.
#include "spare_fork.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>  // PR_SET_PDEATHSIG
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "agent_link.h"
#include "cohort/error.h"
#include "runtime/log.h"

namespace cohort::detail {
namespace {

// This process's threads (/proc/self/task), or -1 when that cannot be read.
int thread_count() {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// In the successor, forked by the middle process: waits to be re-parented to the agent, then
// becomes a spare of its own. Any failure ends it (the agent sees a spare that died standing by).
void become_successor(const JobEnv& env, pid_t agent, int stdout_fd, int stderr_fd) {
  for (int i = 0; i < 2000 && ::getppid() != agent; ++i) ::usleep(1000);  // the middle process exits
  if (::getppid() != agent) ::_exit(1);  // the agent is no subreaper: nobody would reap or stop us
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent) ::_exit(1);  // the agent died before prctl took effect
  ::setpgid(0, 0);  // the agent stops a spare by its process group, as one it started (spawn.h)
  if (::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) ::_exit(1);
  ::close(stdout_fd);
  ::close(stderr_fd);
  restart_agent_link_after_fork(env);
  const AgentLink* link = agent_link();
  if (link == nullptr || link->own_socket().empty()) ::_exit(1);  // it could never be released
}

}  // namespace

SpareFork fork_successor(const JobEnv& env, int stdout_fd, int stderr_fd) {
  SpareFork r;
  auto refuse = [&](std::string why) {
    ::close(stdout_fd);
    ::close(stderr_fd);
    r.refused = std::move(why);
    return r;
  };
  const int threads = thread_count();
  const int ours = agent_link() != nullptr ? 2 : 1;  // this one, and the link's
  if (threads != ours) {
    return refuse(threads < 0 ? "cannot count its threads (/proc/self/task)"
                              : std::to_string(threads - ours) +
                                    " threads of the program besides cohort's ran in it (a fork copies only the "
                                    "calling thread)");
  }
  const pid_t agent = ::getppid();
  int pid_pipe[2];
  if (::pipe2(pid_pipe, O_CLOEXEC) != 0) return refuse(errno_text("cannot create a pipe"));
  std::cout.flush();  // what is buffered is printed once, by this process
  std::cerr.flush();
  std::fflush(nullptr);
  std::unique_lock<std::mutex> still;  // the link's thread holds no lock while we fork
  if (AgentLink* link = agent_link()) still = link->hold_still();
  const pid_t middle = ::fork();
  if (middle != 0 && still.owns_lock()) still.unlock();
  if (middle == 0) {
    (void)still.release();  // the forgotten parent's link (agent_link.cpp): its lock stays as it is
    const pid_t child = ::fork();
    if (child != 0) {  // the middle process: tells the spare who its successor is, and exits
      const ssize_t n = ::write(pid_pipe[1], &child, sizeof(child));
      ::_exit(n == static_cast<ssize_t>(sizeof(child)) && child > 0 ? 0 : 1);
    }
    ::close(pid_pipe[0]);
    ::close(pid_pipe[1]);
    become_successor(env, agent, stdout_fd, stderr_fd);
    r.child = 0;
    return r;
  }
  const std::string fork_error = middle < 0 ? errno_text("cannot fork") : "";
  ::close(pid_pipe[1]);
  pid_t child = -1;
  if (middle > 0) {
    while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
    }
    ssize_t n;
    do {
      n = ::read(pid_pipe[0], &child, sizeof(child));
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof(child))) child = -1;
  }
  ::close(pid_pipe[0]);
  if (child <= 0) return refuse(fork_error.empty() ? "cannot fork (the middle process failed)" : fork_error);
  ::close(stdout_fd);
  ::close(stderr_fd);
  r.child = child;
  return r;
}

int wait_as_standby(const JobEnv& env) {
  AgentLink* link = agent_link();
  if (link == nullptr || link->own_socket().empty()) {
    throw ConfigError(env.rank, "COHORT_STANDBY=1 but there is no link to a cohort run agent to release this "
                                "worker (COHORT_AGENT_SOCKET unset or unusable)");
  }
  log(LogLevel::debug, "standing by for round " + std::to_string(env.restart_count));
  AgentLink::Release release = link->wait_until_released();
  while (release.fork_stdout >= 0) {
    const SpareFork f = fork_successor(env, release.fork_stdout, release.fork_stderr);
    if (f.child == 0) {  // the successor: its own link now, and its own wait
      link = agent_link();
      release = link->wait_until_released();
      continue;
    }
    nlohmann::json answer = {{"type", "forked"}, {"pid", ::getpid()}, {"rank", env.rank}};
    if (f.child > 0) answer["spare"] = f.child;
    else answer["refused"] = f.refused;
    link->send(answer.dump());
    if (f.child < 0) log_warn("rank " + std::to_string(env.rank) + ": this warm spare did not fork its successor: " + f.refused);
    break;
  }
  return release.generation;
}

}  // namespace cohort::detail
