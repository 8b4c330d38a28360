// The worker's link to its agent. See agent_link.h.
#include "agent_link.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/json_fields.h"
#include "runtime/log.h"
#include "runtime/net/unix_datagram.h"
#include "progress.h"

namespace cohort::detail {
namespace {

// A datagram socket address for `path`; false when the path does not fit sun_path.
bool unix_address(const std::string& path, sockaddr_un& addr, socklen_t& len) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.data(), path.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return true;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Writes `text` to `path` through a temporary file and a rename, so that the agent never sees a
// half-written dump. Returns an error text, empty on success.
std::string write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tmp + ": " + std::strerror(errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string error = tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return error;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string error = path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return error;
  }
  return "";
}

}  // namespace

AgentLink::AgentLink(AgentLinkOptions options) : options_(std::move(options)) {
  const int rank = options_.identity.rank;
  if (!unix_address(options_.agent_socket, agent_, agent_len_)) {
    log_warn("COHORT_AGENT_SOCKET='" + options_.agent_socket + "' is not a usable socket path; no heartbeats");
  }
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0 || wake_fd_ < 0) {
    log_warn("rank " + std::to_string(rank) + ": no link to the agent (" + std::strerror(errno) + "); no heartbeats");
    return;
  }
  // Our own address, so that the agent can send us requests. A stale socket of a process that had
  // our pid before is removed first.
  std::string own = options_.own_socket.empty()
                        ? directory_of(options_.agent_socket) + "/w" + std::to_string(options_.identity.pid) + ".sock"
                        : options_.own_socket;
  sockaddr_un addr{};
  socklen_t len = 0;
  if (unix_address(own, addr, len)) {
    ::unlink(own.c_str());
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      own_path_ = own;
    } else {
      log_warn("rank " + std::to_string(rank) + ": cannot bind " + own + " (" + std::strerror(errno) +
               "); the agent cannot ask this rank for its flight record");
    }
  }
  log(LogLevel::debug, "agent link: heartbeats every " + std::to_string(options_.heartbeat_ms) + " ms to " +
                           options_.agent_socket + ", requests at " + own_path_);
  thread_ = std::thread([this] { run(); });
}

AgentLink::~AgentLink() {
  if (thread_.joinable()) {
    stop_.store(true);
    const uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
    (void)ignored;
    thread_.join();
  }
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (!own_path_.empty()) ::unlink(own_path_.c_str());
  for (int fd : {release_.fork_stdout, release_.fork_stderr})  // a fork asked for and never made
    if (fd >= 0) ::close(fd);
}

AgentLink::Release AgentLink::wait_until_released() {
  // No timeout: the agent releases us or kills us (and its death kills us: PR_SET_PDEATHSIG).
  std::unique_lock<std::mutex> lock(released_mutex_);
  released_cv_.wait(lock, [this] { return released_; });
  return std::exchange(release_, Release{release_.generation});  // the descriptors pass to the caller once
}

void AgentLink::close_after_fork() {
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  fd_ = wake_fd_ = -1;
}

std::optional<int> AgentLink::wait_for_rejoin(int current, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(released_mutex_);
  if (!released_cv_.wait_for(lock, timeout, [&] { return rejoin_generation_ > current; })) return std::nullopt;
  return rejoin_generation_;
}

namespace {
std::atomic<bool> g_rejoinable{false};
std::atomic<bool> g_rejoining{false};
std::atomic<int> g_rejoin_generation{-1};
}  // namespace

void AgentLink::beat_now() {
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

int newest_rejoin_generation() { return g_rejoin_generation.load(); }

void set_rejoinable(bool rejoinable) {
  if (g_rejoinable.exchange(rejoinable) == rejoinable) return;
  if (AgentLink* link = agent_link()) link->beat_now();  // the agent knows at once, not a second later
}

void set_rejoining(bool rejoining) {
  if (g_rejoining.exchange(rejoining) == rejoining) return;
  if (AgentLink* link = agent_link()) link->beat_now();
}

bool AgentLink::send(const std::string& json) {
  if (fd_ < 0 || agent_len_ == 0) return false;
  // MSG_DONTWAIT as well as the non-blocking socket: a full agent queue drops the message.
  const ssize_t n = ::sendto(fd_, json.data(), json.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&agent_), agent_len_);
  return n == static_cast<ssize_t>(json.size());
}

void AgentLink::run() {
  using clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(std::max(1, options_.heartbeat_ms));
  auto next = clock::now();
  while (!stop_.load()) {
    const auto now = clock::now();
    if (now >= next) {
      std::lock_guard<std::mutex> busy(busy_);
      heartbeat();
      next = now + interval;
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - clock::now()).count();
    ::poll(fds, 2, static_cast<int>(std::max<int64_t>(0, wait_ms)));
    if (fds[0].revents & POLLIN) {
      std::lock_guard<std::mutex> busy(busy_);
      serve_requests();
    }
    if (fds[1].revents & POLLIN) {  // beat_now(), or the destructor (then stop_ ends the loop)
      uint64_t v = 0;
      ssize_t ignored = ::read(wake_fd_, &v, sizeof(v));
      (void)ignored;
      next = clock::now();
    }
  }
  std::lock_guard<std::mutex> busy(busy_);
  serve_requests();  // a dump asked for just before the process ended is still written
}

void AgentLink::heartbeat() {
  const Progress p = progress();
  const FlightEntry waiting = flight_recorder().oldest_unfinished();
  nlohmann::json j = {{"type", "heartbeat"},
                      {"rank", options_.identity.rank},
                      {"pid", options_.identity.pid},
                      {"step", p.step()},
                      {"reported_step", p.reported_step},
                      {"reports", p.reports},
                      {"ddp_iterations", p.ddp_iterations},
                      {"collectives", p.collectives}};
  if (g_rejoinable.load()) j["rejoinable"] = true;
  if (g_rejoining.load()) j["rejoining"] = true;
  if (waiting.seq != 0) {
    j["waiting_in"] = flight_entry_name(waiting);
    j["waiting_us"] = wall_clock_us() - (waiting.started_us ? waiting.started_us : waiting.enqueued_us);
  }
  if (send(j.dump())) heartbeats_sent_.fetch_add(1);
}

namespace {
// The descriptors a datagram carried (SCM_RIGHTS), at most two: fds[0], fds[1], else -1.
void received_descriptors(msghdr& msg, int fds[2]) {
  fds[0] = fds[1] = -1;
  int found = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (found < 2) fds[found++] = fd; else ::close(fd);  // more than a request carries: not kept
    }
  }
}

void close_descriptors(int fds[2]) {
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0) ::close(fds[i]);
    fds[i] = -1;
  }
}
}  // namespace

void AgentLink::serve_requests() {
  char buf[8192];
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  for (;;) {
    UnixDatagram d;
    const ssize_t n = d.receive(fd_, buf, sizeof(buf), control, sizeof(control), MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // nothing more queued
    int fds[2];
    received_descriptors(d.msg, fds);
    // Only the agent may ask (the directory's mode keeps others out; this keeps strays out).
    if (d.sender() == options_.agent_socket && (d.msg.msg_flags & MSG_CTRUNC) == 0)
      serve(std::string(buf, static_cast<size_t>(n)), fds);
    close_descriptors(fds);  // those serve() did not take
  }
}

void AgentLink::serve(const std::string& text, int fds[2]) {
  const auto request = parse_capped_or_discarded(text);
  if (!request.is_object()) return;
  const std::string type = request.value("type", "");
  if (type == "go" || type == "rejoin") {
    const auto g = request.find("generation");
    const int generation = g != request.end() && g->is_number_integer() ? g->get<int>() : -1;
    std::lock_guard<std::mutex> lock(released_mutex_);
    if (type == "go") {
      if (released_) return;  // a repeated "go" (the agent retries dropped ones) changes nothing
      released_ = true;
      release_.generation = generation;
      const auto f = request.find("fork");
      if (f != request.end() && f->is_boolean() && f->get<bool>() && fds[0] >= 0 && fds[1] >= 0) {
        release_.fork_stdout = std::exchange(fds[0], -1);
        release_.fork_stderr = std::exchange(fds[1], -1);
      }
    } else {
      rejoin_generation_ = std::max(rejoin_generation_, generation);
      g_rejoin_generation.store(rejoin_generation_);
    }
    released_cv_.notify_all();
    return;
  }
  if (request.value("type", "") != "dump") return;  // unknown requests: ignored
  const std::string path = request.value("path", "");
  if (path.empty()) return;
  const Progress p = progress();
  FlightDumpInfo info = options_.identity;
  info.step = p.step();
  info.reported_step = p.reported_step;
  info.ddp_iterations = p.ddp_iterations;
  info.reason = request.value("reason", "");
  const std::string error = write_file(path, flight_record_json(info, flight_recorder().snapshot(), wall_clock_us()));
  if (!error.empty()) {
    log_warn("rank " + std::to_string(info.rank) + ": could not write the flight record: " + error);
    return;
  }
  dumps_written_.fetch_add(1);
  send(nlohmann::json{{"type", "dumped"}, {"rank", info.rank}, {"pid", info.pid}, {"path", path}}.dump());
}

namespace {
// Destroyed at exit (joins the thread, removes the socket). A function-local static, made on the
// first start_agent_link() — after the logger, which init() has used already — so that it is
// destroyed before the logger its thread may still write to.
std::atomic<AgentLink*> g_link{nullptr};  // what agent_link() answers, without the mutex
std::mutex g_link_mutex;
bool g_link_started = false;  // g_link_mutex
std::unique_ptr<AgentLink>& the_link() {
  struct Holder {
    std::unique_ptr<AgentLink> link;
    ~Holder() { g_link.store(nullptr); }  // at exit: senders find no link rather than a dead one
  };
  static Holder holder;
  return holder.link;
}
}  // namespace

void start_agent_link(const JobEnv& env) {
  std::lock_guard<std::mutex> lock(g_link_mutex);
  if (g_link_started) return;  // once per process (stop_agent_link_for_testing() allows another)
  g_link_started = true;
  auto socket = process_env("COHORT_AGENT_SOCKET");
  if (!socket || socket->empty()) return;
  AgentLinkOptions options;
  options.agent_socket = *socket;
  if (auto ms = process_env("COHORT_HEARTBEAT_MS")) {
    try {
      options.heartbeat_ms = std::max(1, std::stoi(*ms));
    } catch (const std::exception&) {
      log_warn("COHORT_HEARTBEAT_MS='" + *ms + "' is not a number; heartbeats every 1000 ms");
    }
  }
  options.identity.rank = env.rank;
  options.identity.world_size = env.world_size;
  options.identity.local_rank = env.local_rank;
  options.identity.node_rank = env.node_rank;
  options.identity.restart_count = env.restart_count;
  options.identity.pid = ::getpid();
  the_link() = std::make_unique<AgentLink>(options);
  g_link.store(the_link().get());
  // A child forked without exec has the object but not the thread: it must neither join it nor
  // remove the parent's socket when it exits, so it forgets the link (a deliberate leak).
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    ::pthread_atfork(nullptr, nullptr, [] {
      g_link.store(nullptr);
      if (AgentLink* forgotten = the_link().release()) forgotten->close_after_fork();
    });
  });
}

void restart_agent_link_after_fork(const JobEnv& env) {
  {
    std::lock_guard<std::mutex> lock(g_link_mutex);
    g_link_started = false;  // the parent's link was forgotten at the fork (above)
  }
  start_agent_link(env);
}

AgentLink* agent_link() { return g_link.load(std::memory_order_acquire); }

void stop_agent_link_for_testing() {
  std::lock_guard<std::mutex> lock(g_link_mutex);
  g_link.store(nullptr);
  the_link().reset();
  g_link_started = false;
}

}  // namespace cohort::detail
