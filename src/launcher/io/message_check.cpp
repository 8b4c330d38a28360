// Kinds of the fields of agents' messages. See message_check.h; the protocol itself is described
// in static/coordinators.h (static jobs) and elastic/coordinators.h (elastic jobs).
#include "launcher/io/message_check.h"

#include <cstdint>
#include <limits>
#include <set>

#include "runtime/json_fields.h"

namespace cohort::launcher {
namespace {

using json = nlohmann::json;

const char* kind_name(FieldKind k) {
  switch (k) {
    case FieldKind::integer: return "an integer";
    case FieldKind::int64: return "a 64-bit integer";
    case FieldKind::string: return "a string";
    case FieldKind::boolean: return "true or false";
    case FieldKind::object: return "an object";
  }
  return "?";
}

bool is_kind(const json& v, FieldKind k) {
  switch (k) {
    case FieldKind::integer:
      return detail::is_integer_in(v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    case FieldKind::int64:
      return detail::is_integer_in(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    case FieldKind::string: return v.is_string();
    case FieldKind::boolean: return v.is_boolean();
    case FieldKind::object: return v.is_object();
  }
  return false;
}

// The protocol's message types, and the kind of every field any of them carries (the union of the
// static and the elastic protocol: both call their first message "join"). A field is checked
// whatever the type of the message it comes in, so that no handler can meet a field of the wrong
// kind, even one that reads a field its own type does not list (the fuzzer found that gap).
const std::set<std::string>& agent_types() {
  static const std::set<std::string> types{"join", "reject", "wait", "start", "done", "stopped", "finish",
                                           "fail", "abort", "stop", "end", "beat", "monitor",
                                           "rejoinable", "repair", "rejoin"};
  return types;
}

const std::vector<FieldSpec>& agent_fields() {
  using K = FieldKind;
  static const std::vector<FieldSpec> fields{
      {"node_rank", K::integer}, {"nnodes", K::integer},      {"nproc", K::integer},       {"rdzv_id", K::string},
      {"min", K::integer},       {"max", K::integer},         {"pid", K::int64},           {"reason", K::string},
      {"timeout", K::boolean},   {"note", K::string},         {"round", K::integer},       {"restarts", K::integer},
      {"world_size", K::integer}, {"rank_base", K::integer},  {"master_addr", K::string},  {"master_port", K::integer},
      {"notice", K::string},     {"failure", K::object},      {"summary", K::string},      {"restart", K::boolean},
      {"node", K::integer},      {"m", K::object},            {"keep_survivors", K::boolean},
      {"max_restarts", K::integer}, {"value", K::boolean},    {"rank", K::integer},        {"generation", K::integer},
  };
  return fields;
}

}  // namespace

std::string field_problem(const json& message, const std::vector<FieldSpec>& fields) {
  for (const FieldSpec& f : fields) {
    auto it = message.find(f.name);
    if (it != message.end() && !is_kind(*it, f.kind)) {
      return std::string("\"") + f.name + "\" is " + it->dump().substr(0, 40) + ", not " + kind_name(f.kind);
    }
  }
  return "";
}

std::string agent_message_problem(const json& message) {
  if (!message.is_object()) return "not a JSON object";
  auto type = message.find("type");
  if (type == message.end() || !type->is_string()) return "no \"type\" string";
  const std::string& name = type->get_ref<const std::string&>();
  if (agent_types().count(name) == 0) return "unknown type \"" + name.substr(0, 40) + "\"";
  if (std::string problem = field_problem(message, agent_fields()); !problem.empty()) {
    return "\"" + name + "\": " + problem;
  }
  if (auto failure = message.find("failure"); failure != message.end()) {
    using K = FieldKind;
    const std::string problem =
        field_problem(*failure, {{"round", K::integer}, {"rank", K::integer}, {"node_rank", K::integer},
                                 {"local_rank", K::integer}, {"pid", K::int64}, {"how", K::string},
                                 {"time_ms", K::int64}, {"summary", K::string}});
    if (!problem.empty()) return "\"" + name + "\": failure " + problem;
  }
  return "";
}

}  // namespace cohort::launcher
