// dashboard/server.cpp — the dashboard's and /metrics' HTTP server on cpp-httplib (see server.h).
//
// Threads: one accepts (listen_after_bind) and hands each connection to the request gate
// (request_gate.h), where it waits without a thread until its request headers are in; then it is
// read and answered on a thread of its own (connection_threads.h).
// A live stream (/api/stream) holds its connection's thread while it is open; it waits on its Hub
// subscription in short slices, so that ~Server can end every stream — after sending what is
// still queued — within a fraction of a second, and then wait for the threads.
#include "dashboard/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <algorithm>
#include <thread>

#include "cohort/error.h"
#include "dashboard/assets.h"
#include "dashboard/gated_http_server.h"
#include "hub/hub.h"
#include "runtime/net/net_util.h"
#include "sim/calibrate.h"
#include "sim/page_assets.h"
#include "sim/report.h"

namespace cohort::dashboard {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kStreamSlice = std::chrono::milliseconds(200);  // how often a stream checks for shutdown
constexpr auto kKeepAlive = std::chrono::seconds(15);          // comment line on an idle stream
constexpr int kStreamRetryMs = 2000;                          // the browser's reconnection delay
constexpr int kBatch = 256;                                   // queued messages sent in one write
constexpr int kMaxStreams = 16;                               // live streams at once (each holds a thread)

const char* const kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

ConfigError config_error(const std::string& what) { return ConfigError(-1, "dashboard: " + what); }

/// True for 127.0.0.0/8, ::1, ::ffff:127.x and "localhost": addresses only this machine reaches.
bool is_loopback_literal(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

/// A host name is loopback when every address it resolves to is; unresolvable names are not.
bool is_loopback_host(const std::string& host) {
  if (is_loopback_literal(host)) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool all = true;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {0};
    const void* addr = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                               : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    inet_ntop(a->ai_family, addr, text, sizeof(text));
    all = all && is_loopback_literal(text);
  }
  freeaddrinfo(found);
  return all;
}

/// Connections may wait for their headers up to half the process's open-file limit (at most 4096):
/// beyond it, the oldest waiter is closed, so that an attack never leaves accept() without a
/// descriptor for the page's own requests.
RequestGateOptions gate_options(const ServerOptions& options) {
  RequestGateOptions gate;
  gate.deadline = options.request_deadline;
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    gate.max_parked = std::clamp<size_t>(files.rlim_cur / 2, 16, gate.max_parked);
  }
  return gate;
}

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]"; }

/// Why binding host:port failed, found by trying it the way httplib does (SO_REUSEADDR).
std::string bind_failure(const std::string& host, int port) {
  const std::string service = std::to_string(port);
  std::string problem;
  int err = 0;
  if (const int fd = detail::listen_on(host, port, 1, &problem, &err); fd >= 0) {
    close(fd);
    return "cannot listen on " + host + ":" + service;
  }
  if (err == 0) return "cannot listen on " + host + ":" + service + ": not an address of this machine (" + problem + ")";
  if (err == EADDRINUSE) {
    return "port " + service + " is in use on " + host + " (choose another port, or 0 for any free one)";
  }
  if (err == EACCES) return "port " + service + " on " + host + " needs privileges (use a port above 1023)";
  if (err == EADDRNOTAVAIL) return "cannot listen on " + host + ":" + service + ": not an address of this machine";
  return "cannot listen on " + host + ":" + service + ": " + problem;
}

/// Compares without an early exit, so that the time taken tells nothing about the token.
bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ (expected.empty() ? 0 : expected[i % expected.size()]));
  }
  return diff == 0;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// A page with its __TOKEN_QUERY__ marks replaced by "?token=..." (nothing without a token), so
/// that its own requests carry the token.
std::string with_token_query(std::string_view page, const std::string& token) {
  const std::string query = token.empty() ? "" : "?token=" + url_encode(token);
  std::string out(page);
  for (size_t at; (at = out.find("__TOKEN_QUERY__")) != std::string::npos;) out.replace(at, 15, query);
  return out;
}

/// "host" of a Host header value ("127.0.0.1:8080", "[::1]:80", "localhost").
std::string host_of(const std::string& header) {
  if (!header.empty() && header[0] == '[') {
    auto end = header.find(']');
    return end == std::string::npos ? header : header.substr(1, end - 1);
  }
  auto colon = header.rfind(':');
  return colon == std::string::npos ? header : header.substr(0, colon);
}

/// One server-sent-event record; a data value with line breaks becomes several data lines.
std::string sse_record(const std::string& event, const std::string& data) {
  std::string out = "event: " + event + "\n";
  size_t from = 0;
  for (;;) {
    size_t nl = data.find('\n', from);
    out += "data: " + data.substr(from, nl == std::string::npos ? std::string::npos : nl - from) + "\n";
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  out += "\n";
  return out;
}

}  // namespace

struct Server::Impl {
  hub::Hub* hub;  // null for a Site
  Site site;
  ServerOptions options;
  GatedHttpServer http;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<int> streams{0};
  std::atomic<bool> listen_returned{false};
  int port = 0;
  int listen_fd = -1;  // the server's listening socket (httplib owns it)
  bool loopback = true;
  std::string index_html;      // the page, with the token carried on to its asset URLs
  std::string sim_index_html;  // the simulator's page at /sim/ (hub mode; empty without em++)

  Impl(hub::Hub* h, Site st, ServerOptions o)
      : hub(h), site(std::move(st)), options(std::move(o)), http(gate_options(options)) {
    if (!site.find_asset) site.find_asset = &find_asset;
    if (site.content_security_policy.empty()) site.content_security_policy = kContentSecurityPolicy;
  }

  void set_common_headers(const httplib::Request& req, httplib::Response& res) const {
    res.set_header("X-Content-Type-Options", "nosniff");
    const bool sim = hub && req.path.rfind("/sim/", 0) == 0;
    res.set_header("Content-Security-Policy", sim ? kSimContentSecurityPolicy : site.content_security_policy.c_str());
    res.set_header("Referrer-Policy", "no-referrer");  // the token may be in the URL
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Cross-Origin-Resource-Policy", "same-origin");
  }

  static void plain(httplib::Response& res, int status, const std::string& text) {
    res.status = status;
    res.set_header("Cache-Control", "no-store");
    res.set_content(text + "\n", "text/plain; charset=utf-8");
  }

  // Every request passes here first: headers, token, method, Host. Handled = refused.
  httplib::Server::HandlerResponse check(const httplib::Request& req, httplib::Response& res) const {
    set_common_headers(req, res);
    if (!options.token.empty()) {
      std::string given;
      const std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Bearer ", 0) == 0) given = auth.substr(7);
      else if (req.has_param("token")) given = req.get_param_value("token");
      if (!same_secret(given, options.token)) {
        res.set_header("WWW-Authenticate", "Bearer realm=\"cohort\"");
        res.set_header("Connection", "close");
        plain(res, 401, "401 unauthorized: this " + site.what + " needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)");
        return httplib::Server::HandlerResponse::Handled;
      }
    } else if (loopback) {
      // Without a token only this machine can connect; refusing other Host names also keeps a
      // web page from reading the dashboard through DNS rebinding.
      const std::string host = host_of(req.get_header_value("Host"));
      if (!host.empty() && !is_loopback_literal(host) && host != options.host) {
        plain(res, 403, "403 forbidden: unexpected Host header '" + host + "' for a loopback dashboard");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      res.set_header("Connection", "close");
      plain(res, 405, "405 method not allowed: the " + site.what + " is read-only (GET and HEAD only)");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) { return check(req, res); });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty() && res.status == 404) plain(res, 404, "404 not found");
    });
    // Every method httplib knows reaches the pre-routing check above, which refuses it with 405;
    // these only make sure no request falls through to a default.
    auto refuse = [](const httplib::Request&, httplib::Response& res) { plain(res, 405, "405 method not allowed"); };
    http.Post(".*", refuse);
    http.Put(".*", refuse);
    http.Patch(".*", refuse);
    http.Delete(".*", refuse);
    http.Options(".*", refuse);

    http.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(index_html, "text/html; charset=utf-8");
    });
    http.Get("/index.html", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(index_html, "text/html; charset=utf-8");
    });
    http.Get(R"(/assets/([A-Za-z0-9._-]+))", [this](const httplib::Request& req, httplib::Response& res) {
      const Asset* a = site.find_asset(req.matches[1].str());
      if (a == nullptr || std::string_view(a->name) == "index.html") {
        plain(res, 404, "404 not found");
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
    });
    if (!hub) {
      http.Get("/params.json", [this](const httplib::Request&, httplib::Response& res) {
        if (site.params_json.empty()) return plain(res, 404, "404 no parameters given to this server");
        res.set_header("Cache-Control", "no-store");
        res.set_content(site.params_json, "application/json; charset=utf-8");
      });
      return;
    }
    routes_sim();
    http.Get("/api/state", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(hub->snapshot().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                      "application/json; charset=utf-8");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_content(hub->prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/api/stream", [this](const httplib::Request& req, httplib::Response& res) { stream(req, res); });
  }

  // The simulator's page, starting from a calibration of this job's event log (docs/sim.md).
  void routes_sim() {
    auto index = [this](const httplib::Request&, httplib::Response& res) {
      if (sim_index_html.empty()) return plain(res, 404, std::string("404 ") + sim_page::kMissing);
      res.set_header("Cache-Control", "no-store");
      res.set_content(sim_index_html, "text/html; charset=utf-8");
    };
    http.Get("/sim/", index);
    http.Get("/sim/index.html", index);
    http.Get(R"(/sim/assets/([A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
      const Asset* a = sim_page::find_asset(req.matches[1].str());
      if (a == nullptr || std::string_view(a->name) == "index.html") return plain(res, 404, "404 not found");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
    });
    http.Get("/sim/params.json", [this](const httplib::Request&, httplib::Response& res) {
      if (options.run_dir.empty()) return plain(res, 404, "404 this dashboard has no run directory to calibrate on");
      try {
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        const sim::Calibration c = sim::calibrate({sim::summarize_run(options.run_dir, /*allow_load=*/true)}, cores);
        res.set_header("Cache-Control", "no-store");
        res.set_content(sim::params_json(c.params).dump(), "application/json; charset=utf-8");
      } catch (const std::exception& e) {
        plain(res, 404, std::string("404 no calibration of this job yet: ") + e.what());
      }
    });
  }

  // Server-sent events: "retry:", then every hub message, a comment every 15 s when idle; ends
  // when the server stops (or the hub closes, or the browser goes away: a write fails).
  void stream(const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    if (req.method == "HEAD") {
      res.set_content("", "text/event-stream");
      return;
    }
    if (streams.fetch_add(1) >= kMaxStreams) {
      streams.fetch_sub(1);
      res.set_header("Retry-After", "5");
      plain(res, 503, "503 too many live streams open on this dashboard");
      return;
    }
    struct Live {
      std::shared_ptr<hub::Subscription> sub;
      bool started = false;
      int quick_misses = 0;
      Clock::time_point last_write = Clock::now();
    };
    auto live = std::make_shared<Live>();
    live->sub = hub->subscribe();
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, live](size_t, httplib::DataSink& sink) {
          if (!live->started) {
            live->started = true;
            live->last_write = Clock::now();
            const std::string hello = "retry: " + std::to_string(kStreamRetryMs) + "\n: cohort live stream\n\n";
            return sink.write(hello.data(), hello.size());
          }
          hub::StreamMessage m;
          if (stopping.load()) {  // what is queued still goes out (the job's last state), then the end
            std::string batch;
            for (int more = 0; more < 4 * kBatch && live->sub->next(m, std::chrono::milliseconds(0)); ++more) {
              batch += sse_record(m.event, m.data);
            }
            if (!batch.empty() && !sink.write(batch.data(), batch.size())) return false;
            sink.done();
            return true;
          }
          const auto waited_from = Clock::now();
          if (live->sub->next(m, std::chrono::duration_cast<std::chrono::milliseconds>(kStreamSlice))) {
            live->quick_misses = 0;
            live->last_write = Clock::now();
            // What else is already queued goes in the same write (a large job sends many per step).
            std::string batch = sse_record(m.event, m.data);
            for (int more = 0; more < kBatch && live->sub->next(m, std::chrono::milliseconds(0)); ++more) {
              batch += sse_record(m.event, m.data);
            }
            return sink.write(batch.data(), batch.size());
          }
          // next() is false on a timeout, or at once when the hub is closing: then end the stream.
          if (Clock::now() - waited_from < kStreamSlice / 4) {
            if (++live->quick_misses >= 3) {
              sink.done();
              return true;
            }
          } else {
            live->quick_misses = 0;
          }
          if (Clock::now() - live->last_write >= kKeepAlive) {
            live->last_write = Clock::now();
            static const std::string ping = ": keep-alive\n\n";
            return sink.write(ping.data(), ping.size());
          }
          return true;
        },
        [this](bool) { streams.fetch_sub(1); });
  }
};

Server::Server(hub::Hub& hub, ServerOptions options) : Server(&hub, Site{}, std::move(options)) {}

Server::Server(Site site, ServerOptions options) : Server(nullptr, std::move(site), std::move(options)) {}

Server::Server(hub::Hub* hub, Site site, ServerOptions options)
    : impl_(std::make_unique<Impl>(hub, std::move(site), std::move(options))) {
  Impl& s = *impl_;
  std::string& host = s.options.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) throw config_error("no host to listen on");
  if (s.options.port < 0 || s.options.port > 65535) {
    throw config_error("port " + std::to_string(s.options.port) + " is out of range (0..65535; 0 picks a free one)");
  }
  s.loopback = is_loopback_host(host);
  if (!s.loopback && s.options.token.empty()) {
    throw config_error("listening on " + host +
                       " (not a loopback address) needs a token that every request must carry: give one "
                       "(cohort run --dashboard-token, cohort dashboard --token, cohort sim serve --token, or COHORT_DASHBOARD_TOKEN), or "
                       "keep the default host 127.0.0.1");
  }

  // A browser that goes away while a response is written must not kill the process (the launcher
  // ignores SIGPIPE already, and resets it for its workers).
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, nullptr);
  }

  const Asset* page = s.site.find_asset("index.html");
  if (page == nullptr) throw config_error("the page is missing from this build (index.html not embedded)");
  s.index_html = with_token_query(page->view(), s.options.token);
  if (const Asset* sim = sim_page::find_asset("index.html"); sim && hub) {
    s.sim_index_html = with_token_query(sim->view(), s.options.token);
  }

  // httplib's default also sets SO_REUSEPORT, which would let a second server share a port that is
  // in use (and split the connections between them): SO_REUSEADDR only.
  s.http.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    s.listen_fd = sock;  // the last socket httplib makes is the one that binds
  });
  // The accepted socket's SO_SNDTIMEO (a blocking send gives up after it); reads and the request's
  // deadline are the gate's and the answering stream's (GatedHttpServer).
  s.http.set_write_timeout(5, 0);
  s.http.set_payload_max_length(64 * 1024);
  s.routes();

  const int port = s.options.port == 0 ? s.http.bind_to_any_port(host) : (s.http.bind_to_port(host, s.options.port) ? s.options.port : -1);
  if (port <= 0) throw config_error(bind_failure(host, s.options.port));
  // httplib listens with a backlog of 5: connects beyond a burst of 5 (a page and its assets, slow
  // clients) had their SYNs dropped and retried a second later. Listening again raises it.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  s.port = port;
  s.thread = std::thread([&s] {
    s.http.listen_after_bind();
    s.listen_returned.store(true);
  });
  // stop() only acts once the server runs: wait for that, so that ~Server can always stop it.
  while (!s.http.is_running() && !s.listen_returned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (s.listen_returned.load()) {
    s.thread.join();
    throw config_error("the HTTP server on " + host + ":" + std::to_string(port) + " stopped at once");
  }
}

Server::~Server() {
  if (!impl_) return;
  // Streams first: each sends what is still queued and ends (within one wait slice); then the rest.
  impl_->stopping.store(true);
  const auto deadline = Clock::now() + 2 * kStreamSlice + std::chrono::milliseconds(100);
  while (impl_->streams.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->http.stop_gate();
}

int Server::port() const { return impl_->port; }

std::string Server::url() const {
  std::string host = impl_->options.host;
  if (is_wildcard(host)) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "127.0.0.1";
  }
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  std::string url = "http://" + host + ":" + std::to_string(impl_->port) + "/";
  if (!impl_->options.token.empty()) url += "?token=" + url_encode(impl_->options.token);
  return url;
}

}  // namespace cohort::dashboard
