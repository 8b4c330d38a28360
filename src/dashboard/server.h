// dashboard/server.h — the HTTP server of the live dashboard and of /metrics.
//
// One cpp-httplib server on its own threads, reading a Hub (monitor/hub.h); it never changes the
// job (GET and HEAD only). Binds 127.0.0.1 by default; any other address needs a token, which
// every request must then carry (Authorization: Bearer, or ?token= for the page's own requests).
// Routes and formats: docs/monitoring.md.
#pragma once

#include <memory>
#include <string>

namespace cohort::hub {
class Hub;
}

namespace cohort::dashboard {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: the kernel picks a free port
  std::string token;  // required (non-empty) when host is not a loopback address
};

class Server {
 public:
  /// Binds and starts serving; throws cohort::ConfigError saying why it cannot (a non-loopback
  /// host without a token, the port in use, a bad address).
  Server(hub::Hub& hub, ServerOptions options);
  /// Stops serving (closes live streams) and joins the threads.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  /// "http://127.0.0.1:41234/" (with "?token=..." when a token is set).
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::dashboard
