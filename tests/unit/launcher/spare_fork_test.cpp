// A released warm spare forks its successor (src/runtime/agent_link/spare_fork.h): the worker's
// side and the agent's worker link, with real processes. The agent is a process forked by the test
// (it must be a child subreaper, which the test binary itself must not become); it writes what it
// saw to a pipe as "key=value" lines. The whole thing under `cohort run` is
// tests/integration/survivors_test.cpp (its "replaced" events name the forked spares).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "launcher/workers/worker_link.h"
#include "runtime/agent_link/agent_link.h"
#include "runtime/agent_link/spare_fork.h"

namespace {

using cohort::launcher::WorkerLink;
using namespace std::chrono_literals;

// Everything readable on fd within `timeout` (until end of file).
std::string read_until_eof(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::map<std::string, std::string> key_values(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

// The standby worker: its link to the agent, the wait (forking when asked); exits with the
// generation its own "go" named, after printing who it is to its stdout.
[[noreturn]] void run_spare() {
  cohort::detail::stop_agent_link_for_testing();  // one of the test binary's own, if any
  cohort::JobEnv env;
  env.rank = 1;
  env.world_size = 2;
  cohort::detail::start_agent_link(env);
  const int generation = cohort::detail::wait_as_standby(env);
  std::cout << "released pid " << ::getpid() << " generation " << generation << std::endl;
  ::_exit(generation);
}

// The agent: starts a spare, releases it with "fork", then releases the successor, reaps both.
[[noreturn]] void run_agent(int report_fd) {
  std::ostringstream r;
  auto say = [&](const std::string& text) {
    const std::string all = r.str() + text;
    ssize_t ignored = ::write(report_fd, all.data(), all.size());
    (void)ignored;
    ::_exit(0);
  };
  r << "subreaper=" << (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0) << "\n";
  WorkerLink link;
  ::setenv("COHORT_AGENT_SOCKET", link.socket_path().c_str(), 1);
  ::setenv("COHORT_HEARTBEAT_MS", "50", 1);
  const pid_t spare = ::fork();
  if (spare == 0) run_spare();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!link.knows(spare) && std::chrono::steady_clock::now() < deadline) {
    link.receive();
    std::this_thread::sleep_for(10ms);
  }
  if (!link.knows(spare)) say("error=the spare never sent a heartbeat\n");
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) say("error=pipe\n");
  r << "sent=" << link.request(spare, R"({"type":"go","fork":true,"generation":7})", {out[1], out[1]}) << "\n";
  ::close(out[1]);
  std::optional<cohort::launcher::ForkAnswer> answer;
  while (!answer && std::chrono::steady_clock::now() < deadline) {
    link.receive();
    answer = link.take_fork_answer(spare);
    std::this_thread::sleep_for(10ms);
  }
  if (!answer) say("error=no forked answer\n");
  const pid_t successor = answer->spare;
  r << "refused=" << answer->refused << "\nsuccessor_is_other=" << (successor > 0 && successor != spare) << "\n";
  int status = 0;
  r << "spare_reaped=" << (::waitpid(spare, &status, 0) == spare) << "\nspare_exit=" << WEXITSTATUS(status) << "\n";
  while (successor > 0 && !link.knows(successor) && std::chrono::steady_clock::now() < deadline) {
    link.receive();
    std::this_thread::sleep_for(10ms);
  }
  r << "successor_known=" << link.knows(successor) << "\nsuccessor_own_group=" << (::getpgid(successor) == successor)
    << "\n";
  link.request(successor, R"({"type":"go","generation":9})");
  const std::string printed = read_until_eof(out[0], 20s);  // the successor's stdout, which we made
  r << "successor_printed=" << printed;
  r << "successor_reaped=" << (::waitpid(successor, &status, 0) == successor)
    << "\nsuccessor_exit=" << WEXITSTATUS(status) << "\n";
  say("");
  ::_exit(0);  // say() did already
}

TEST(SpareFork, AReleasedSpareForksItsSuccessorWhichWaitsInItsTurnAsTheAgentsChild) {
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t agent = ::fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) run_agent(report[1]);
  ::close(report[1]);
  const std::string text = read_until_eof(report[0], 60s);
  ::close(report[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(agent, &status, 0), agent);
  const auto kv = key_values(text);
  ASSERT_EQ(kv.count("error"), 0u) << text;
  EXPECT_EQ(kv.at("subreaper"), "1") << text;
  EXPECT_EQ(kv.at("sent"), "1") << text;
  EXPECT_EQ(kv.at("refused"), "") << text;
  EXPECT_EQ(kv.at("successor_is_other"), "1") << text;
  // The spare went on with the generation of its own "go"; the successor waited for another one.
  EXPECT_EQ(kv.at("spare_reaped"), "1") << text;
  EXPECT_EQ(kv.at("spare_exit"), "7") << text;
  EXPECT_EQ(kv.at("successor_known"), "1") << text;  // it stood by with a link of its own
  EXPECT_EQ(kv.at("successor_own_group"), "1") << text;
  ASSERT_EQ(kv.count("successor_printed"), 1u) << text;
  EXPECT_NE(kv.at("successor_printed").find("generation 9"), std::string::npos) << text;  // on the pipe sent
  // Re-parented to the agent: the agent reaps it, as the spares it starts.
  EXPECT_EQ(kv.at("successor_reaped"), "1") << text;
  EXPECT_EQ(kv.at("successor_exit"), "9") << text;
}

TEST(SpareFork, ASpareRunningThreadsOfItsOwnDoesNotForkAndSaysWhy) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread program_thread([&] {  // what a program may start before init()
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
  });
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  cohort::JobEnv env;
  const cohort::detail::SpareFork f = cohort::detail::fork_successor(env, fds[0], fds[1]);
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  program_thread.join();
  EXPECT_EQ(f.child, -1);
  EXPECT_NE(f.refused.find("threads of the program besides cohort's ran in it"), std::string::npos) << f.refused;
  // The descriptors meant for the successor are closed, not leaked.
  EXPECT_EQ(::fcntl(fds[0], F_GETFD), -1);
  EXPECT_EQ(::fcntl(fds[1], F_GETFD), -1);
}

}  // namespace
