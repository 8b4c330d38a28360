// launcher/io/message_check.h — what a message from another process must look like before anything
// acts on it. Agents' messages (channel.h) and workers' datagrams (worker_link.h) arrive from
// sockets anyone on the machine (or the network) can write to; the handlers read fields with
// nlohmann's value(), which throws on a wrong type. Checking every field's kind here, once, where
// the bytes come in, makes every handler total: a message that fails the check is dropped (and
// its sender named once on stderr), never acted on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cohort::launcher {

enum class FieldKind {
  integer,  // an integer within int's range (ranks, rounds, counts, ports)
  int64,    // an integer within int64_t's range (pids, steps, times, counters)
  string,
  boolean,
  object,
};

struct FieldSpec {
  const char* name;
  FieldKind kind;
};

/// Empty when each of `fields` that `message` has is of its kind (a field may be absent: the
/// handlers give defaults); otherwise what is wrong, naming the field. `message` must be an object.
std::string field_problem(const nlohmann::json& message, const std::vector<FieldSpec>& fields);

/// Empty when `message` is an agent message: an object whose "type" is one of the protocol's
/// (channel.h) and whose fields, including those of a "failure" object, have their kinds.
std::string agent_message_problem(const nlohmann::json& message);

}  // namespace cohort::launcher
