// fork/exec of a worker with parent-death signal and its own process group; orphans. See spawn.h.
#include "launcher/workers/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>  // PR_SET_PDEATHSIG
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

#include "cohort/error.h"

namespace cohort::launcher {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void child(pid_t parent, char* const* argv, char* const* envp, int out_w, int err_w, int exec_err_w) {
  // Only async-signal-safe calls from here on (the parent may have threads in the future).
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(128 + SIGKILL);  // the launcher died before prctl took effect
  // Dispositions the launcher changed must not leak: ignored signals stay ignored across exec.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGCHLD, SIGHUP}) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, 0);
  dup2(out_w, 1);
  dup2(err_w, 2);
  execve(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = write(exec_err_w, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

std::mutex owned_mutex;
std::set<pid_t> owned;  // children some part of the agent waits for by pid (spawn.h)

// This process's children, each with whether it is a zombie: /proc/<pid>/stat reads
// "pid (comm) state ppid ...", comm possibly holding spaces and parentheses.
std::vector<std::pair<pid_t, bool>> children_of(pid_t self) {
  std::vector<std::pair<pid_t, bool>> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = ::readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // it ended meanwhile
    const size_t comm_end = line.rfind(')');
    char state = 0;
    long ppid = 0;
    if (comm_end == std::string::npos || std::sscanf(line.c_str() + comm_end + 1, " %c %ld", &state, &ppid) != 2) continue;
    if (ppid == self) out.emplace_back(static_cast<pid_t>(std::atol(e->d_name)), state == 'Z');
  }
  ::closedir(proc);
  return out;
}

}  // namespace

void own_child(pid_t pid) {
  std::lock_guard<std::mutex> lock(owned_mutex);
  owned.insert(pid);
}

int reap_orphans() {
  // WNOWAIT: a look that leaves the child waitable for its owner. Nothing dead, nothing to do.
  siginfo_t info{};
  if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return 0;
  std::lock_guard<std::mutex> lock(owned_mutex);
  std::set<pid_t> children;
  int reaped = 0;
  for (const auto& [pid, zombie] : children_of(::getpid())) {
    children.insert(pid);
    if (zombie && owned.count(pid) == 0 && ::waitpid(pid, nullptr, WNOHANG) == pid) ++reaped;
  }
  // An owned pid that is no child any more was reaped by its owner: forgotten, as the pid may
  // come back as an orphan's.
  for (auto it = owned.begin(); it != owned.end();) it = children.count(*it) ? std::next(it) : owned.erase(it);
  return reaped;
}

SpawnedProcess spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Everything the child needs is prepared before fork: no allocation happens in the child.
  std::vector<char*> c_argv = c_strings(argv);
  std::vector<char*> c_env = c_strings(env);
  int out[2], err[2], exec_err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(exec_err, O_CLOEXEC) != 0) {
    throw ConfigError(-1, std::string("cannot create pipes for a worker: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  // Signals stay blocked across fork until the child has reset the launcher's handlers, so that a
  // signal meant for the child can never run the launcher's handler in it.
  sigset_t all, previous;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &previous);
  pid_t pid = fork();
  if (pid == 0) child(parent, c_argv.data(), c_env.data(), out[1], err[1], exec_err[1]);
  int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], exec_err[0], exec_err[1]}) close(fd);
    throw ConfigError(-1, std::string("cannot fork a worker: ") + std::strerror(fork_errno));
  }

  own_child(pid);     // waited for by pid (worker_group.cpp, standby.cpp, store_host.cpp, below)
  setpgid(pid, pid);  // also here, so the group exists before we might signal it
  close(out[1]);
  close(err[1]);
  close(exec_err[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_err[0], &exec_errno, sizeof(exec_errno));  // EOF as soon as exec succeeds
  } while (n < 0 && errno == EINTR);
  close(exec_err[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    waitpid(pid, nullptr, 0);
    close(out[0]);
    close(err[0]);
    throw ConfigError(-1, "cannot execute '" + argv[0] + "': " + std::strerror(exec_errno));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  return {pid, out[0], err[0]};
}

}  // namespace cohort::launcher
