// `cohort sim serve` (see sim_serve.h).
#include "sim_serve.h"

#include <CLI/CLI.hpp>

#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "cohort/error.h"
#include "dashboard/assets.h"
#include "dashboard/server.h"
#include "sim/page_assets.h"
#include "sim/report.h"
#include "sim_command.h"

namespace cohort::tools {

CLI::App* add_sim_serve_command(CLI::App& sim, SimOptions& o) {
  CLI::App* cmd = sim.add_subcommand("serve", "Serve the simulator's page (it runs in the browser tab)");
  cmd->add_option("--preset", o.preset, "The page starts from this preset");
  cmd->add_option("--params", o.param_files, "... or from this JSON file of parameters (a calibration's output too)");
  cmd->add_option("--set", o.sets, "... with this parameter changed, KEY=VALUE; repeatable");
  cmd->add_option("--port", o.port, "Port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--host", o.host, "Address to listen on; other than loopback it needs --token")->capture_default_str();
  cmd->add_option("--token", o.token, "Token every request must carry (Bearer header or ?token=); or COHORT_DASHBOARD_TOKEN");
  cmd->footer("The page also opens from a file: build/web-sim/index.html (docs/sim.md).");
  return cmd;
}

int run_sim_serve(const SimOptions& options, const sim::Params* params) {
  if (!sim_page::find_asset("index.html")) {
    std::cerr << "cohort sim serve: error: " << sim_page::kMissing << std::endl;
    return 1;
  }
  std::string token = options.token;
  if (token.empty()) {
    if (const char* t = std::getenv("COHORT_DASHBOARD_TOKEN")) token = t;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    dashboard::Site site;
    site.find_asset = &sim_page::find_asset;
    site.what = "simulator";
    site.content_security_policy = dashboard::kSimContentSecurityPolicy;
    if (params) site.params_json = sim::params_json(*params).dump();
    dashboard::ServerOptions server_options;
    server_options.host = options.host;
    server_options.port = options.port;
    server_options.token = token;
    dashboard::Server server(site, server_options);
    std::cout << "cohort sim serve: simulator at " << server.url() << " (Ctrl-C stops)" << std::endl;
    for (;;) {
      timespec wait{1, 0};
      if (sigtimedwait(&stop_signals, nullptr, &wait) > 0) break;
    }
    return 0;
  } catch (const ConfigError& e) {
    std::string what = e.what();
    for (const char* prefix : {"cohort: ", "dashboard: "}) {
      if (what.rfind(prefix, 0) == 0) what = what.substr(std::strlen(prefix));
    }
    std::cerr << "cohort sim serve: error: " << what << std::endl;
    return 1;
  }
}

}  // namespace cohort::tools
