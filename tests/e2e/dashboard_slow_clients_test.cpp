// Slow-connection attacks on the dashboard's HTTP server (issue 22: 24-30 drip-fed connections
// stopped it for ~5 s; later, with a thread per connection, 256 did). Connections wait for their
// request headers in the request gate (src/dashboard/request_gate.h) without a thread, each for at
// most the request deadline: real sockets on loopback, the server in this process.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dashboard/request_gate.h"
#include "dashboard/server.h"
#include "hub/hub.h"

namespace {

using cohort::dashboard::RequestGate;
using cohort::dashboard::RequestGateOptions;
using cohort::dashboard::Server;
using cohort::dashboard::ServerOptions;
using cohort::hub::Hub;
using cohort::hub::HubOptions;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

HubOptions hub_options() {
  HubOptions o;
  o.job_name = "slow-clients-test";
  return o;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& text) {
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

/// Waits up to `limit` for the peer to close fd; returns what it sent before (or "<open>").
std::string read_until_closed(int fd, std::chrono::milliseconds limit) {
  timeval tv{};
  tv.tv_sec = 0;
  tv.tv_usec = 50 * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  const auto until = Clock::now() + limit;
  char buf[4096];
  while (Clock::now() < until) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return got;
    if (n > 0) got.append(buf, static_cast<size_t>(n));
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return got;  // reset: closed too
  }
  return "<open>";
}

int process_threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

/// Room for `wanted` client sockets and the server's side of each: raises the soft limit of open
/// files to the hard one; returns how many connections fit.
int connections_that_fit(int wanted) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  const long room = (static_cast<long>(std::min<rlim_t>(r.rlim_cur, 1 << 20)) - 200) / 2;
  return static_cast<int>(std::min<long>(wanted, room));
}

void expect_page_answers(int port, const std::string& while_what) {
  for (const char* path : {"/", "/api/state", "/metrics"}) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(5);
    c.set_read_timeout(5);
    const auto t0 = Clock::now();
    auto ok = c.Get(path);
    ASSERT_TRUE(ok) << path << " did not answer while " << while_what;
    EXPECT_EQ(ok->status, 200) << path;
    std::printf("%s (%s): %.1f ms\n", path, while_what.c_str(),
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
}

// Far more drip-feeding clients than the server has connection threads (256): none of them holds
// a thread while its request trickles in, so the page, the state and /metrics answer at once.
TEST(DashboardSlowClients, TwoThousandDripFedConnectionsHoldNoThreadAndThePageAnswers) {
  const int wanted = 2000;
  const int n = connections_that_fit(wanted);
  ASSERT_GT(n, 600) << "this machine's open-file limit leaves room for " << n << " connections only";
  Hub hub(hub_options());
  Server server(hub, {});
  const int threads_before = process_threads();
  std::vector<int> slow;
  for (int i = 0; i < n; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    ASSERT_TRUE(send_all(fd, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
    slow.push_back(fd);
  }
  std::atomic<bool> dripping{true};
  std::thread drip([&] {  // one more byte of the never-ending header line each, every 200 ms
    while (dripping.load()) {
      for (int fd : slow) ::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(200ms);
    }
  });
  std::this_thread::sleep_for(600ms);  // every slow request is in and dripping
  const int threads_during = process_threads();
  expect_page_answers(server.port(), std::to_string(n) + " slow clients dripped");
  dripping = false;
  drip.join();
  // Waiting connections cost a file descriptor, not a thread (the drip thread is the test's own).
  EXPECT_LT(threads_during - threads_before, 10) << n << " dripping connections made threads";
  std::printf("%d dripping connections: threads %d -> %d\n", n, threads_before, threads_during);
  for (int fd : slow) ::close(fd);
}

// The deadline bounds what a connection costs: one that never finishes its headers, or sends
// nothing at all, is closed when it passes; one whose headers come in pieces within it is answered.
TEST(DashboardSlowClients, ConnectionsThatDoNotFinishTheirHeadersInTimeAreClosed) {
  Hub hub(hub_options());
  ServerOptions options;
  options.request_deadline = 1000ms;
  Server server(hub, options);
  const int dripping = connect_to(server.port());
  const int silent = connect_to(server.port());
  const int pieces = connect_to(server.port());
  ASSERT_TRUE(dripping >= 0 && silent >= 0 && pieces >= 0);
  ASSERT_TRUE(send_all(dripping, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
  for (const char* piece : {"GET /api/state HTTP/1.1\r\n", "Host: 127.0.0.1\r\n", "\r\n"}) {
    ASSERT_TRUE(send_all(pieces, piece));
    std::this_thread::sleep_for(150ms);
  }
  const std::string answered = read_until_closed(pieces, 5000ms);
  EXPECT_EQ(answered.rfind("HTTP/1.1 200", 0), 0u) << answered.substr(0, 200);

  const auto t0 = Clock::now();
  std::thread drip([&] {
    for (int i = 0; i < 40; ++i) {
      if (::send(dripping, "x", 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(100ms);
    }
  });
  EXPECT_EQ(read_until_closed(silent, 5000ms), "") << "a connection that sent nothing was not closed";
  EXPECT_EQ(read_until_closed(dripping, 5000ms), "") << "a connection that dripped its headers was not closed";
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  drip.join();
  EXPECT_LT(took, 3.0) << "closed " << took << " s after a 1 s deadline";
  for (int fd : {dripping, silent, pieces}) ::close(fd);
}

TEST(DashboardSlowClients, HeadersLargerThanAnyRequestOfTheDashboardAreRefused) {
  Hub hub(hub_options());
  Server server(hub, {});
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(20000, 'a')));
  const std::string reply = read_until_closed(fd, 5000ms);
  EXPECT_EQ(reply.rfind("HTTP/1.1 431", 0), 0u) << reply.substr(0, 200);
  ::close(fd);
  expect_page_answers(server.port(), "after an oversized request");
}

// The gate alone: a limit on waiting connections makes room by closing the oldest, and a complete
// request is handed to serve() with its bytes still unread.
TEST(RequestGate, MakesRoomByClosingTheOldestWaiterAndServesCompleteRequests) {
  std::atomic<int> served{0};
  std::string first_line;
  std::mutex m;
  RequestGateOptions options;
  options.max_parked = 2;
  RequestGate gate(
      [&](int fd) {
        char buf[256];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        {
          std::lock_guard<std::mutex> lock(m);
          first_line.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
        }
        ::close(fd);
        served.fetch_add(1);
      },
      options);
  int pairs[3][2];
  for (auto& p : pairs) ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
  for (auto& p : pairs) gate.park(p[1]);  // the third pushes the first out
  EXPECT_EQ(read_until_closed(pairs[0][0], 2000ms), "");
  EXPECT_EQ(read_until_closed(pairs[1][0], 300ms), "<open>");
  ASSERT_TRUE(send_all(pairs[2][0], "GET /x HTTP/1.1\r\n\r\n"));
  const auto until = Clock::now() + 2s;
  while (served.load() == 0 && Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(served.load(), 1);
  {
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(first_line, "GET /x HTTP/1.1\r\n\r\n");
  }
  gate.stop();
  EXPECT_EQ(read_until_closed(pairs[1][0], 2000ms), "") << "stop() left a waiting connection open";
  for (auto& p : pairs) ::close(p[0]);
}

}  // namespace
