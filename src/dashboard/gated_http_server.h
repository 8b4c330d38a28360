// dashboard/gated_http_server.h — httplib's server with its connections sent through a RequestGate.
//
// httplib's accept loop hands each connection to process_and_close_socket at once (the task queue
// runs that in place, on the accept thread), which parks it in the gate (request_gate.h); when its
// request headers are in, the gate calls answer() on a thread, which reads and answers the request
// with httplib's own processing (process_request) through a ConnectionStream. One request per
// connection: an idle keep-alive connection would hold a thread that ~Server waits for (requests
// are few: the page, its state, scrapes; streams are long anyway).
#pragma once

#include <httplib.h>

#include "dashboard/request_gate.h"

namespace cohort::dashboard {

class GatedHttpServer : public httplib::Server {
 public:
  explicit GatedHttpServer(RequestGateOptions options);
  /// Closes the connections still waiting for their requests and waits for those being answered.
  /// After httplib's stop(): no connection comes in any more.
  void stop_gate() { gate_.stop(); }

 private:
  bool process_and_close_socket(socket_t sock) override;  // parks it
  void answer(int fd);                                    // on a gate thread

  RequestGate gate_;
};

}  // namespace cohort::dashboard
