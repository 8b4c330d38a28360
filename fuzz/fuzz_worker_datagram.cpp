// Fuzzes the agent's reading of a worker-link datagram (parse_worker_datagram) and, for the
// metrics and events it accepts, the hub that builds the dashboard's state from them: no crash,
// no exception, whatever a process on the machine sends.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/workers/worker_link.h"
#include "hub/hub.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string problem;
  // The sender as the kernel would report it; datagrams claiming pid 4242 are accepted.
  const auto m = cohort::launcher::parse_worker_datagram(reinterpret_cast<const char*>(data), size, 4242, &problem);
  if (!m || m->body.is_null()) return 0;
  static cohort::hub::Hub hub(cohort::hub::HubOptions{});  // state carries over inputs, as in a job
  hub.worker_message(m->body, 0);
  (void)hub.snapshot().dump();
  (void)hub.prometheus_text();
  return 0;
}
