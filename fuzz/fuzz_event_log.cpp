// Fuzzes the hub's reading of an event log (events.jsonl, as `cohort dashboard RUN_DIR` replays
// it): lines of anything give a state and a Prometheus text, never a crash or an exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "hub/hub.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cohort::hub::Hub hub(cohort::hub::HubOptions{});
  hub.replay_text(std::string(reinterpret_cast<const char*>(data), size));
  (void)hub.snapshot().dump();
  (void)hub.prometheus_text();
  return 0;
}
