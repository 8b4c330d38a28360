// Fuzzes what an agent accepts from another agent (launcher/io/message_check.h): a line that passes
// agent_message_problem must be readable the way the handlers read it — value() with each field's
// type — without an exception (nlohmann's value() throws on a wrong type, which used to abort the
// elastic host on one line {"type":1}).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/io/message_check.h"
#include "runtime/json_fields.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  auto message = cohort::detail::parse_capped_or_discarded(text, text + size);  // as the channel reads it
  if (message.is_discarded() || !cohort::launcher::agent_message_problem(message).empty()) return 0;
  // Accepted: every field the handlers read, as they read it (throws: a finding).
  for (const char* f : {"node_rank", "nnodes", "nproc", "min", "max", "round", "restarts", "world_size",
                        "rank_base", "master_port", "node"})
    (void)message.value(f, 0);
  for (const char* f : {"pid"}) (void)message.value(f, int64_t{0});
  for (const char* f : {"type", "rdzv_id", "reason", "note", "master_addr", "notice", "summary"})
    (void)message.value(f, std::string());
  for (const char* f : {"timeout", "restart"}) (void)message.value(f, false);
  if (message.contains("failure")) {
    const auto& failure = message["failure"];
    for (const char* f : {"round", "rank", "node_rank", "local_rank"}) (void)failure.value(f, 0);
    for (const char* f : {"pid", "time_ms"}) (void)failure.value(f, int64_t{0});
    for (const char* f : {"how", "summary"}) (void)failure.value(f, std::string());
  }
  return 0;
}
