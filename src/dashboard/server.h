// dashboard/server.h — the HTTP server of the live dashboard and of /metrics.
//
// One cpp-httplib server on its own threads, reading a Hub (hub/hub.h); it never changes the
// job (GET and HEAD only). Binds 127.0.0.1 by default; any other address needs a token, which
// every request must then carry (Authorization: Bearer, or ?token= for the page's own requests).
// Routes and formats: docs/monitoring.md. The simulator's page (docs/sim.md) is served by the same
// guarded server as a Site.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace cohort::hub {
class Hub;
}

namespace cohort::dashboard {

struct Asset;

/// Another site than the dashboard on the same guarded server (`cohort sim serve`): its embedded
/// files (index.html first), its content security policy, one JSON document at /params.json.
struct Site {
  const Asset* (*find_asset)(std::string_view name) = nullptr;
  std::string content_security_policy;
  std::string params_json;  // served at /params.json (404 when empty)
  std::string what = "dashboard";  // in messages ("the simulator")
};

/// The simulator's page compiles its WebAssembly from the script that carries it
/// ('wasm-unsafe-eval'), which Emscripten's loader reads back through fetch() of its own data: URL.
inline constexpr const char* kSimContentSecurityPolicy =
    "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: the kernel picks a free port
  std::string token;  // required (non-empty) when host is not a loopback address
  /// The job's run directory: the dashboard's /sim/ (the simulator's page) starts from a
  /// calibration of its event log (/sim/params.json). Empty: the page starts from its presets.
  std::string run_dir;
  /// How long a connection may take to send its request headers before it is closed (a client
  /// that drip-feeds its request holds a file descriptor that long, never a thread).
  std::chrono::milliseconds request_deadline{10000};
};

class Server {
 public:
  /// Binds and starts serving; throws cohort::ConfigError saying why it cannot (a non-loopback
  /// host without a token, the port in use, a bad address).
  Server(hub::Hub& hub, ServerOptions options);
  /// A site without a hub (no /api, no /metrics): its files and /params.json only.
  Server(Site site, ServerOptions options);
  /// Stops serving (closes live streams) and joins the threads.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  /// "http://127.0.0.1:41234/" (with "?token=..." when a token is set).
  std::string url() const;

 private:
  Server(hub::Hub* hub, Site site, ServerOptions options);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::dashboard
