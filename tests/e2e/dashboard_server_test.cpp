// The dashboard's HTTP server (src/dashboard/server.h) against a real Hub, with real sockets:
// routes and their content types, security headers, read-only methods, the token, the Host check,
// the port-in-use error, live streams, a destructor that does not wait for open streams. Slow
// clients: dashboard_slow_clients_test.cpp.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/error.h"
#include "dashboard/server.h"
#include "hub/hub.h"

namespace {

using cohort::dashboard::Server;
using cohort::dashboard::ServerOptions;
using cohort::hub::Hub;
using cohort::hub::HubOptions;
using Clock = std::chrono::steady_clock;

HubOptions hub_options() {
  HubOptions o;
  o.job_name = "server-test";
  return o;
}

nlohmann::json metrics(int rank, int step, double loss) {
  return {{"type", "metrics"}, {"pid", 100 + rank}, {"rank", rank}, {"world_size", 2}, {"restart", 0},
          {"step", step}, {"t", 1764470000.0 + step}, {"step_s", 0.03},
          {"phases", {{"data", 0.001}, {"forward", 0.01}, {"backward", 0.015}, {"comm_wait", 0.003}, {"optimizer", 0.001}}},
          {"samples", 64}, {"samples_per_s", 2133.0}, {"scalars", {{"loss", loss}}}};
}

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  return c;
}

TEST(DashboardServer, ServesThePageItsAssetsTheStateAndMetrics) {
  Hub hub(hub_options());
  hub.round_started(0, 2, 0);
  hub.worker_message(metrics(0, 1, 2.0), 0);
  hub.worker_message(metrics(1, 1, 2.2), 0);
  Server server(hub, {});
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()) + "/");
  auto c = client(server.port());

  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("id=\"loss-chart\""), std::string::npos);
  EXPECT_NE(page->body.find("assets/app.js\""), std::string::npos) << "no token: asset URLs carry none";
  EXPECT_EQ(page->body.find("TOKEN_QUERY__"), std::string::npos);
  // Security headers on every response.
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Cache-Control"), "no-store");

  for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"app.js", "text/javascript; charset=utf-8"},
           {"style.css", "text/css; charset=utf-8"},
           {"chart.min.js", "text/javascript; charset=utf-8"}}) {
    auto a = c.Get("/assets/" + name);
    ASSERT_TRUE(a) << name;
    EXPECT_EQ(a->status, 200) << name;
    EXPECT_EQ(a->get_header_value("Content-Type"), type) << name;
    EXPECT_GT(a->body.size(), 1000u) << name;
  }
  auto chart = c.Get("/assets/chart.min.js");
  EXPECT_NE(chart->body.find("Chart.js v3"), std::string::npos) << "Debian's Chart.js 3 is embedded";
  EXPECT_EQ(c.Get("/assets/nothing.js")->status, 404);
  EXPECT_EQ(c.Get("/assets/../CMakeLists.txt")->status, 404);
  EXPECT_EQ(c.Get("/nowhere")->status, 404);

  auto state = c.Get("/api/state");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->status, 200);
  EXPECT_EQ(state->get_header_value("Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(state->get_header_value("Cache-Control"), "no-store");
  const auto j = nlohmann::json::parse(state->body);
  EXPECT_EQ(j["job"]["name"], "server-test");
  EXPECT_EQ(j["ranks"].size(), 2u);

  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m->body.find("cohort_rank_step{"), std::string::npos);

  auto head = c.Head("/api/state");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

TEST(DashboardServer, IsReadOnly) {
  Hub hub(hub_options());
  Server server(hub, {});
  for (const std::string path : {"/", "/api/state", "/metrics", "/api/stream"}) {
    auto c = client(server.port());
    auto post = c.Post(path.c_str(), "{}", "application/json");
    ASSERT_TRUE(post) << path;
    EXPECT_EQ(post->status, 405) << path;
    EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
    auto c2 = client(server.port());
    EXPECT_EQ(c2.Put(path.c_str(), "x", "text/plain")->status, 405) << path;
    auto c3 = client(server.port());
    EXPECT_EQ(c3.Delete(path.c_str())->status, 405) << path;
    auto c4 = client(server.port());
    EXPECT_EQ(c4.Patch(path.c_str(), "x", "text/plain")->status, 405) << path;
    auto c5 = client(server.port());
    EXPECT_EQ(c5.Options(path.c_str())->status, 405) << path;
  }
}

TEST(DashboardServer, NonLoopbackNeedsAToken) {
  Hub hub(hub_options());
  ServerOptions o;
  o.host = "0.0.0.0";
  try {
    Server server(hub, o);
    FAIL() << "a non-loopback dashboard without a token must not start";
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0.0.0.0"), std::string::npos) << e.what();
  }
  // Loopback addresses of any spelling need none.
  for (const std::string host : {"127.0.0.1", "localhost", "127.0.0.2"}) {
    ServerOptions l;
    l.host = host;
    EXPECT_NO_THROW(Server(hub, l)) << host;
  }
}

TEST(DashboardServer, EveryRequestCarriesTheToken) {
  Hub hub(hub_options());
  ServerOptions o;
  o.host = "0.0.0.0";
  o.token = "s3cret/+&";
  Server server(hub, o);
  EXPECT_NE(server.url().find("?token=s3cret%2F%2B%26"), std::string::npos) << server.url();
  for (const std::string path : {"/", "/assets/app.js", "/api/state", "/metrics", "/api/stream"}) {
    auto c = client(server.port());
    auto none = c.Get(path.c_str());
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"cohort\"");
    EXPECT_EQ(none->body.find("s3cret"), std::string::npos);
    auto c2 = client(server.port());
    EXPECT_EQ(c2.Get((path + "?token=wrong").c_str())->status, 401) << path;
    auto c3 = client(server.port());
    EXPECT_EQ(c3.Get(path.c_str(), {{"Authorization", "Bearer s3cret/+"}})->status, 401) << "a prefix is not the token";
    auto c4 = client(server.port());
    EXPECT_EQ(c4.Head(path.c_str(), {{"Authorization", "Bearer s3cret/+&"}})->status, 200) << path;
    auto c5 = client(server.port());
    EXPECT_EQ(c5.Head((path + "?token=s3cret%2F%2B%26").c_str())->status, 200) << path;
    auto c6 = client(server.port());
    EXPECT_EQ(c6.Post(path.c_str(), {{"Authorization", "Bearer s3cret/+&"}}, "", "text/plain")->status, 405) << path;
  }
  // The page carries the token on to its assets (the browser sends no header for them).
  auto c = client(server.port());
  auto page = c.Get("/", {{"Authorization", "Bearer s3cret/+&"}});
  EXPECT_NE(page->body.find("assets/app.js?token=s3cret%2F%2B%26\""), std::string::npos);
}

TEST(DashboardServer, RefusesForeignHostNamesWithoutAToken) {
  Hub hub(hub_options());
  Server server(hub, {});
  auto c = client(server.port());
  EXPECT_EQ(c.Get("/api/state", {{"Host", "attacker.example:80"}})->status, 403) << "DNS rebinding";
  auto c2 = client(server.port());
  EXPECT_EQ(c2.Get("/api/state", {{"Host", "localhost:" + std::to_string(server.port())}})->status, 200);
  auto c3 = client(server.port());
  EXPECT_EQ(c3.Get("/api/state", {{"Host", "[::1]:" + std::to_string(server.port())}})->status, 200);
}

TEST(DashboardServer, PortInUseIsAConfigErrorNamingThePort) {
  Hub hub(hub_options());
  Server first(hub, {});
  ServerOptions o;
  o.port = first.port();
  try {
    Server second(hub, o);
    FAIL() << "two servers on one port";
  } catch (const cohort::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  ServerOptions bad;
  bad.host = "no-such-host.invalid";
  bad.token = "t";
  EXPECT_THROW(Server(hub, bad), cohort::ConfigError);
}

// Reads a live stream on its own thread until told to stop or the server ends it.
class StreamReader {
 public:
  explicit StreamReader(int port, std::string path = "/api/stream") {
    thread_ = std::thread([this, port, path] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30);
      {
        std::lock_guard<std::mutex> lock(mu_);
        client_ = &c;
      }
      auto res = c.Get(path.c_str(), [this](const char* data, size_t n) {
        std::lock_guard<std::mutex> lock(mu_);
        text_.append(data, n);
        return !stop_.load();
      });
      {
        std::lock_guard<std::mutex> lock(mu_);
        client_ = nullptr;
      }
      ended_ = true;
    });
  }
  ~StreamReader() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (client_ != nullptr) client_->stop();  // do not wait for the next keep-alive comment
    }
    thread_.join();
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }
  bool wait_for(const std::string& needle, double seconds) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (Clock::now() < deadline) {
      if (text().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  bool ended() const { return ended_.load(); }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::string text_;
  httplib::Client* client_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ended_{false};
};

TEST(DashboardServer, StreamsHubMessagesAsServerSentEvents) {
  Hub hub(hub_options());
  hub.round_started(0, 2, 0);
  Server server(hub, {});
  StreamReader reader(server.port());
  ASSERT_TRUE(reader.wait_for("retry: ", 5)) << reader.text();
  hub.worker_message(metrics(0, 7, 1.5), 0);
  ASSERT_TRUE(reader.wait_for("event: metrics\ndata: {", 5)) << reader.text();
  hub.job_event("checkpoint_saved", "checkpoint step-00000007 committed", {{"rank", 0}, {"step", 7}});
  ASSERT_TRUE(reader.wait_for("event: event\ndata: {", 5)) << reader.text();
  // Every record is "event: NAME", one or more "data: " lines, and a blank line.
  const std::string text = reader.text();
  const size_t at = text.find("event: metrics\n");
  const size_t end = text.find("\n\n", at);
  ASSERT_NE(end, std::string::npos);
  const std::string data = text.substr(at + 15 + 6, end - at - 15 - 6);
  const auto j = nlohmann::json::parse(data);
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["rank"], 0);
}

TEST(DashboardServer, StopsPromptlyWithStreamsOpen) {
  Hub hub(hub_options());
  auto server = std::make_unique<Server>(hub, ServerOptions{});
  std::vector<std::unique_ptr<StreamReader>> readers;
  for (int i = 0; i < 3; ++i) readers.push_back(std::make_unique<StreamReader>(server->port()));
  for (auto& r : readers) ASSERT_TRUE(r->wait_for("retry: ", 5));
  // An idle keep-alive connection too.
  auto idle = client(server->port());
  idle.set_keep_alive(true);
  ASSERT_EQ(idle.Get("/api/state")->status, 200);

  // The job's last words, published just before the server stops, still reach the open pages.
  hub.job_event("finished", "job succeeded (exit code 0)", {{"exit_code", 0}, {"state", "succeeded"}});
  const auto t0 = Clock::now();
  server.reset();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 3.0) << "~Server waited " << took << " s for open streams";
  for (auto& r : readers) {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!r->ended() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(r->ended()) << "the browser's stream was not closed";
    EXPECT_NE(r->text().find("\"kind\":\"finished\""), std::string::npos) << r->text();
  }
  std::printf("~Server with 3 open streams and an idle connection: %.3f s\n", took);
}

TEST(DashboardServer, LimitsLiveStreamsAndServesTheRestMeanwhile) {
  Hub hub(hub_options());
  Server server(hub, {});
  std::vector<std::unique_ptr<StreamReader>> readers;
  for (int i = 0; i < 16; ++i) readers.push_back(std::make_unique<StreamReader>(server.port()));
  for (auto& r : readers) ASSERT_TRUE(r->wait_for("retry: ", 10));
  auto c = client(server.port());
  auto refused = c.Get("/api/stream");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->get_header_value("Retry-After"), "5");
  // The page, the state and /metrics still answer while 16 streams hold their threads.
  for (const char* path : {"/", "/api/state", "/metrics"}) {
    auto ok = client(server.port()).Get(path);
    ASSERT_TRUE(ok) << path;
    EXPECT_EQ(ok->status, 200) << path;
  }
  // (A closed page's slot is freed when a write to it fails: at the latest its second keep-alive
  // comment, 30 s; not waited for here.)
}

TEST(DashboardServer, EndsStreamsWhenTheHubCloses) {
  Hub hub(hub_options());
  Server server(hub, {});
  StreamReader reader(server.port());
  ASSERT_TRUE(reader.wait_for("retry: ", 5));
  hub.close();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!reader.ended() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(reader.ended());
}

}  // namespace
