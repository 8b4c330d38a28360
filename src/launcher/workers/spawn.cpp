// fork/exec of a worker with parent-death signal and its own process group. See spawn.h.
#include "launcher/workers/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>  // PR_SET_PDEATHSIG
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

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
