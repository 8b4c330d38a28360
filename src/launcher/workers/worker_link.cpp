// The agent's end of the worker link. See worker_link.h.
#include "launcher/workers/worker_link.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>  // flock
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cohort/error.h"
#include "launcher/io/message_check.h"
#include "runtime/json_fields.h"
#include "runtime/net/unix_datagram.h"

namespace cohort::launcher {
namespace {

// The longest run directory that leaves room for "/w<pid>.sock" in a sockaddr_un (108 bytes).
constexpr size_t kMaxDirLength = sizeof(sockaddr_un::sun_path) - 24;

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Removes what an agent leaves in its run directory — sockets, half-written files, the lock — and
// the directory itself unless flight records remain in it.
void clean_run_dir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      // store-<round>: a round's store file (agent.cpp), left behind by workers that were killed.
      if (has_suffix(name, ".sock") || name.find(".tmp-") != std::string::npos || name == "agent.lock" ||
          name.rfind("store-", 0) == 0) {
        ::unlink((dir + "/" + name).c_str());
      }
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());  // fails, as intended, when flight records are left in it
}

// An agent killed with SIGKILL cannot clean up; the next one does. A run directory's agent.lock is
// flock()ed by its agent for as long as it lives — the kernel drops the lock when the process dies,
// also in another PID namespace sharing /tmp — so a lock we can take belongs to a dead agent.
void remove_abandoned_run_dirs(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("cohort-", 0) != 0) continue;
    const std::string dir = base + "/" + name;
    const int lock = ::open((dir + "/agent.lock").c_str(), O_RDONLY | O_CLOEXEC);
    if (lock < 0) continue;  // not ours (other users' directories are unreadable), or no lock
    if (::flock(lock, LOCK_EX | LOCK_NB) == 0) clean_run_dir(dir);
    ::close(lock);
  }
  ::closedir(d);
}

// Returns the directory; *lock_fd holds its agent.lock, locked for this process's lifetime.
std::string make_run_dir(int* lock_fd) {
  std::vector<std::string> bases;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg) bases.emplace_back(xdg);
  bases.emplace_back("/tmp");
  std::string last_error = "no usable directory";
  for (const auto& base : bases) {
    std::string templ = base + "/cohort-" + std::to_string(::getpid()) + "-XXXXXX";
    if (templ.size() > kMaxDirLength) {
      last_error = templ + " is too long for a socket path";
      continue;
    }
    remove_abandoned_run_dirs(base);
    if (::mkdtemp(templ.data()) == nullptr) {  // mode 0700
      last_error = "cannot create " + templ + ": " + std::strerror(errno);
      continue;
    }
    *lock_fd = ::open((templ + "/agent.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (*lock_fd >= 0) ::flock(*lock_fd, LOCK_EX);
    return templ;
  }
  throw ConfigError(-1, "no run directory for the worker link (" + last_error + ")");
}

}  // namespace

WorkerLink::WorkerLink() {
  dir_ = make_run_dir(&lock_fd_);
  socket_path_ = dir_ + "/agent.sock";
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string error = std::strerror(errno);
    if (fd_ >= 0) ::close(fd_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    clean_run_dir(dir_);
    throw ConfigError(-1, "cannot bind the worker link at " + socket_path_ + ": " + error);
  }
  // Heartbeats of many workers may arrive while the agent is busy: room for a few hundred.
  int bytes = 1 << 20;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  const int on = 1;  // every datagram carries its sender's pid, as the kernel knows it (receive())
  ::setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
}

WorkerLink::~WorkerLink() {
  if (fd_ >= 0) ::close(fd_);
  // Sockets and half-written files go; flight records stay, and with them the directory.
  clean_run_dir(dir_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::optional<WorkerMessage> parse_worker_datagram(const char* data, size_t n, pid_t sender_pid, std::string* problem) {
  using K = FieldKind;
  auto j = detail::parse_capped_or_discarded(data, data + n);
  if (!j.is_object() || !j.contains("pid")) {
    *problem = "not a JSON object with a pid";
    return std::nullopt;
  }
  *problem = field_problem(j, {{"type", K::string}, {"pid", K::int64}, {"rank", K::integer}, {"step", K::int64},
                               {"reports", K::int64}, {"ddp_iterations", K::int64}, {"collectives", K::int64},
                               {"waiting_in", K::string}, {"waiting_us", K::int64}, {"path", K::string},
                               {"rejoinable", K::boolean}, {"rejoining", K::boolean},
                               {"spare", K::int64}, {"refused", K::string}});
  if (problem->empty() && j["pid"].get<int64_t>() != sender_pid) {
    *problem = "pid " + j["pid"].dump() + " sent by process " + std::to_string(sender_pid);
  }
  if (!problem->empty()) return std::nullopt;
  WorkerMessage m;
  m.type = j.value("type", "");
  m.pid = j["pid"].get<int64_t>();
  m.rank = j.value("rank", -1);
  if (m.type == "heartbeat") {
    Heartbeat& h = m.heartbeat;
    h.step = j.value("step", int64_t{0});
    h.reports = j.value("reports", int64_t{0});
    h.ddp_iterations = j.value("ddp_iterations", int64_t{0});
    h.collectives = j.value("collectives", int64_t{0});
    h.rejoinable = j.value("rejoinable", false);
    h.rejoining = j.value("rejoining", false);
    if (j.contains("waiting_in")) {
      h.waiting_in = j["waiting_in"].get<std::string>();
      h.waiting_s = static_cast<double>(j.value("waiting_us", int64_t{0})) / 1e6;
    }
  } else if (m.type == "dumped") {
    m.path = j.value("path", "");
  } else if (m.type == "forked") {
    m.fork.spare = static_cast<pid_t>(j.value("spare", int64_t{-1}));
    m.fork.refused = j.value("refused", "");
    if (m.fork.spare <= 0 && m.fork.refused.empty()) m.fork.refused = "it named no successor";
  } else if (m.type == "metrics" || m.type == "event") {
    m.body = std::move(j);
  }
  return m;
}

std::vector<WorkerMessage> WorkerLink::receive() {
  std::vector<WorkerMessage> out;
  char buf[65536];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  for (;;) {
    detail::UnixDatagram d;
    const ssize_t n = d.receive(fd_, buf, sizeof(buf), control, sizeof(control));
    msghdr& msg = d.msg;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // nothing more queued
    // The kernel's word for who sent it (SO_PASSCRED): a datagram claiming another process's pid
    // is some other program of this user, not that worker, and is dropped.
    pid_t sender_pid = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred{};
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        sender_pid = cred.pid;
      }
    }
    std::string problem;
    std::optional<WorkerMessage> parsed = parse_worker_datagram(buf, static_cast<size_t>(n), sender_pid, &problem);
    if (!parsed) {
      if (dropped_++ == 0) std::cerr << "cohort run: warning: dropped a worker-link datagram: " << problem << std::endl;
      continue;
    }
    WorkerMessage& m = *parsed;
    const std::string sender = d.sender();
    if (!sender.empty()) senders_[static_cast<pid_t>(m.pid)] = sender;  // unbound senders cannot be answered
    if (m.type == "forked") fork_answers_[static_cast<pid_t>(m.pid)] = m.fork;
    out.push_back(std::move(m));
  }
  return out;
}

bool WorkerLink::request(pid_t pid, const std::string& json, const std::vector<int>& fds) {
  auto it = senders_.find(pid);
  if (it == senders_.end() || fds.size() > 4) return false;
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  if (it->second.size() >= sizeof(to.sun_path)) return false;
  std::memcpy(to.sun_path, it->second.c_str(), it->second.size() + 1);
  iovec iov{const_cast<char*>(json.data()), json.size()};
  msghdr msg{};
  msg.msg_name = &to;
  msg.msg_namelen = sizeof(to);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  const ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(json.size());
}

std::optional<ForkAnswer> WorkerLink::take_fork_answer(pid_t pid) {
  auto it = fork_answers_.find(pid);
  if (it == fork_answers_.end()) return std::nullopt;
  ForkAnswer a = std::move(it->second);
  fork_answers_.erase(it);
  return a;
}

}  // namespace cohort::launcher
