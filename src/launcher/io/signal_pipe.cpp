// Self-pipe signal delivery for the supervision loop. See signal_pipe.h.
#include "launcher/io/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace cohort::launcher {
namespace {

int g_write_fd = -1;

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_write_fd, &b, 1);  // pipe full: a wake-up is pending anyway
  (void)ignored;
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return;
  read_fd_ = p[0];
  g_write_fd = p[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &sa, nullptr);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, nullptr);
}

SignalPipe::~SignalPipe() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &dfl, nullptr);
  if (read_fd_ >= 0) close(read_fd_);
  if (g_write_fd >= 0) close(g_write_fd);
  g_write_fd = -1;
}

std::vector<int> SignalPipe::drain() {
  std::vector<int> out;
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(read_fd_, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  return out;
}

void SignalPipe::throw_if_interrupted() {
  for (int sig : drain()) {
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) throw Interrupted(sig);
  }
}

}  // namespace cohort::launcher
