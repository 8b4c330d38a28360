#include "dashboard_command.h"

#include <CLI/CLI.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cohort/error.h"
#include "dashboard/server.h"
#include "hub/hub.h"

namespace cohort::tools {
namespace {

namespace fs = std::filesystem;

/// Feeds the complete lines appended to a log since the last call to the hub (Hub::replay_text,
/// which also streams them to open pages), so that a growing log is read once, line by line.
class LogFollower {
 public:
  LogFollower(std::string path, hub::Hub& hub) : path_(std::move(path)), hub_(hub) {}

  /// Lines read this time (0 when the log did not grow).
  size_t poll() {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw ConfigError(-1, "dashboard: cannot read " + path_ + ": " + std::strerror(errno));
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size < offset_) {  // replaced or truncated: what was read stays, new lines are read from the start
      std::cerr << "cohort dashboard: " << path_ << " shrank; reading it from its start again" << std::endl;
      offset_ = 0;
    }
    if (size == offset_) return 0;
    std::string chunk(static_cast<size_t>(size - offset_), '\0');
    in.seekg(offset_);
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    chunk.resize(static_cast<size_t>(in.gcount()));
    const size_t end = chunk.rfind('\n');
    if (end == std::string::npos) return 0;  // a line still being written
    chunk.resize(end + 1);
    offset_ += static_cast<std::streamoff>(chunk.size());
    return hub_.replay_text(chunk);
  }

 private:
  std::string path_;
  hub::Hub& hub_;
  std::streamoff offset_ = 0;
};

/// The error's message without the "cohort: dashboard: " its origin put in front.
std::string plain(const std::exception& e) {
  std::string what = e.what();
  for (const char* prefix : {"cohort: ", "dashboard: "}) {
    if (what.rfind(prefix, 0) == 0) what = what.substr(std::strlen(prefix));
  }
  return what;
}

}  // namespace

CLI::App* add_dashboard_command(CLI::App& app, DashboardOptions& o) {
  CLI::App* cmd = app.add_subcommand("dashboard", "Serve the dashboard and /metrics of a run from its event log");
  cmd->add_option("RUN_DIR", o.run_dir, "The run directory (holds events.jsonl; printed by cohort run)")->required();
  cmd->add_option("--port", o.port, "Port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--host", o.host, "Address to listen on; other than loopback it needs --token")->capture_default_str();
  cmd->add_option("--token", o.token, "Token every request must carry (Bearer header or ?token=); or COHORT_DASHBOARD_TOKEN");
  cmd->add_flag("--no-follow", o.no_follow, "Read the log once (default: also follow it while it grows)");
  cmd->footer("Example: cohort dashboard cohort-runs/20261130-041500-1234 --port 8080");
  return cmd;
}

int run_dashboard_command(const DashboardOptions& options) {
  DashboardOptions o = options;
  if (o.token.empty()) {
    if (const char* t = std::getenv("COHORT_DASHBOARD_TOKEN")) o.token = t;
  }
  std::error_code ec;
  if (!fs::is_directory(o.run_dir, ec)) {
    std::cerr << "cohort dashboard: error: " << o.run_dir << " is not a directory (give the run directory of a cohort run)"
              << std::endl;
    return 1;
  }
  const std::string log = (fs::path(o.run_dir) / "events.jsonl").string();
  if (fs::exists(fs::symlink_status(log, ec)) && !fs::is_regular_file(log, ec)) {  // a FIFO would block the reads
    std::cerr << "cohort dashboard: error: " << log << " is not a regular file (cohort run writes the event log as one)"
              << std::endl;
    return 1;
  }
  if (!fs::is_regular_file(log, ec)) {
    std::cerr << "cohort dashboard: error: no event log " << log
              << " (is " << o.run_dir << " the run directory of a cohort run? it prints its run directory at start)"
              << std::endl;
    return 1;
  }

  // SIGINT/SIGTERM end the command; blocked here, before the server's threads start (they inherit
  // the mask), and waited for below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    hub::HubOptions hub_options;
    hub_options.job_name = fs::path(o.run_dir).lexically_normal().filename().string();
    if (hub_options.job_name.empty() || hub_options.job_name == ".") {
      hub_options.job_name = fs::absolute(o.run_dir).lexically_normal().parent_path().filename().string();
    }
    hub::Hub hub(hub_options);
    LogFollower follower(log, hub);
    const size_t lines = follower.poll();

    dashboard::ServerOptions server_options;
    server_options.host = o.host;
    server_options.port = o.port;
    server_options.token = o.token;
    server_options.run_dir = o.run_dir;
    dashboard::Server server(hub, server_options);
    const std::string url = server.url();
    const std::string base = url.substr(0, url.find('?'));
    std::cout << "cohort dashboard: " << lines << " lines from " << log
              << (o.no_follow ? "" : " (following it while it grows)") << "\n"
              << "cohort dashboard: dashboard at " << url << " (metrics at " << base << "metrics); Ctrl-C stops" << std::endl;

    bool warned = false;
    for (;;) {
      timespec wait{1, 0};
      const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
      if (sig > 0) break;
      if (!o.no_follow) {
        try {
          follower.poll();
          warned = false;
        } catch (const ConfigError& e) {
          if (!warned) std::cerr << "cohort dashboard: " << plain(e) << std::endl;  // keep serving what was read
          warned = true;
        }
      }
    }
    hub.close();
    return 0;
  } catch (const ConfigError& e) {
    std::cerr << "cohort dashboard: error: " << plain(e) << std::endl;
    return 1;
  }
}

}  // namespace cohort::tools
