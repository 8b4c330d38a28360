// httplib's server with its connections sent through a RequestGate. See gated_http_server.h.
#include "dashboard/gated_http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "dashboard/connection_stream.h"

namespace cohort::dashboard {
namespace {

constexpr auto kReadTimeout = std::chrono::seconds(5);   // the whole request, once its headers are in
constexpr auto kWriteTimeout = std::chrono::seconds(5);  // each write

/// httplib's accept loop enqueues each connection's processing; here that only parks it.
struct InPlace : httplib::TaskQueue {
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

GatedHttpServer::GatedHttpServer(RequestGateOptions options) : gate_([this](int fd) { answer(fd); }, options) {
  new_task_queue = [] { return new InPlace; };
}

bool GatedHttpServer::process_and_close_socket(socket_t sock) {
  gate_.park(sock);
  return true;
}

void GatedHttpServer::answer(int fd) {
  ConnectionStream stream(fd, std::chrono::steady_clock::now() + kReadTimeout, kWriteTimeout);
  bool closed = false;
  process_request(stream, /*close_connection=*/true, closed, {});
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace cohort::dashboard
