// Shared by the tests of monitoring through `cohort run` (monitor_process_test.cpp with the probe,
// monitor_fashion_mnist_test.cpp with the example): the run's event log read back, waiting, HTTP
// GET on loopback, the probe's command line.
#pragma once

#include <arpa/inet.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/launcher/launcher_test_util.h"

namespace monitor_run_test {

using namespace launcher_test;
using nlohmann::json;

inline std::vector<json> read_log(const std::string& dir) {
  std::vector<json> out;
  for (const auto& line : lines_of(slurp(dir + "/events.jsonl"))) {
    json j = json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "not JSON: " << line;
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

inline std::vector<json> events(const std::vector<json>& log, const std::string& kind, const std::string& anomaly = "") {
  std::vector<json> out;
  for (const auto& j : log) {
    if (j.value("type", "") == "event" && j.value("kind", "") == kind &&
        (anomaly.empty() || j.value("anomaly", "") == anomaly)) {
      out.push_back(j);
    }
  }
  return out;
}

inline std::vector<json> metrics(const std::vector<json>& log, int rank = -1) {
  std::vector<json> out;
  for (const auto& j : log) {
    if (j.value("type", "") == "metrics" && (rank < 0 || j.value("rank", -1) == rank)) out.push_back(j);
  }
  return out;
}

inline std::string dump(const std::vector<json>& log) {
  std::string out;
  for (const auto& j : log) {
    if (j.value("type", "") == "event") out += j.dump() + "\n";
  }
  return out;
}

inline bool wait_until(const std::function<bool()>& ready, double timeout_s) {
  const auto deadline = clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

// GET `path` from a loopback URL "http://127.0.0.1:PORT/..." with a plain socket: the whole response.
inline std::string http_get(const std::string& url, const std::string& path) {
  const size_t colon = url.find(':', 7);
  const int port = std::atoi(url.c_str() + colon + 1);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

inline std::vector<std::string> cohort_run(const std::string& run_dir, std::vector<std::string> flags,
                                    const std::vector<std::string>& program) {
  std::vector<std::string> cmd{COHORT_BIN, "run", "--run-dir", run_dir};
  cmd.insert(cmd.end(), flags.begin(), flags.end());
  cmd.push_back("--");
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

inline std::vector<std::string> probe(std::vector<std::string> args) {
  args.insert(args.begin(), METRICS_PROBE_BIN);
  return args;
}

}  // namespace monitor_run_test
