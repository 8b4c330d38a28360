// Kinds of the fields of agents' messages. See message_check.h; the protocol itself is described
// in peer_coordinators.h (static jobs) and elastic_coordinators.h (elastic jobs).
#include "message_check.h"

#include <cstdint>
#include <limits>
#include <map>

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

// Every field any message type carries, with its kind (the union of the static and the elastic
// protocol: both call their first message "join").
const std::map<std::string, std::vector<FieldSpec>>& agent_fields() {
  using K = FieldKind;
  static const std::map<std::string, std::vector<FieldSpec>> fields{
      {"join", {{"node_rank", K::integer}, {"nnodes", K::integer}, {"nproc", K::integer}, {"rdzv_id", K::string},
                {"min", K::integer}, {"max", K::integer}, {"pid", K::int64}}},
      {"reject", {{"reason", K::string}, {"timeout", K::boolean}}},
      {"wait", {{"note", K::string}}},
      {"start", {{"round", K::integer}, {"restarts", K::integer}, {"world_size", K::integer}, {"rank_base", K::integer},
                 {"node_rank", K::integer}, {"nnodes", K::integer}, {"master_addr", K::string},
                 {"master_port", K::integer}, {"notice", K::string}, {"failure", K::object}}},
      {"done", {{"round", K::integer}}},
      {"stopped", {{"round", K::integer}}},
      {"finish", {{"round", K::integer}}},
      {"fail", {{"round", K::integer}, {"summary", K::string}, {"failure", K::object}}},
      {"abort", {{"round", K::integer}, {"summary", K::string}}},
      {"stop", {{"round", K::integer}, {"restart", K::boolean}, {"summary", K::string}, {"failure", K::object}}},
      {"end", {{"round", K::integer}, {"summary", K::string}, {"failure", K::object}}},
      {"beat", {}},
      {"monitor", {{"node", K::integer}, {"m", K::object}}},
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
  const auto& table = agent_fields();
  auto known = table.find(type->get<std::string>());
  if (known == table.end()) return "unknown type \"" + type->get<std::string>().substr(0, 40) + "\"";
  if (std::string problem = field_problem(message, known->second); !problem.empty()) {
    return "\"" + known->first + "\": " + problem;
  }
  if (auto failure = message.find("failure"); failure != message.end()) {
    using K = FieldKind;
    const std::string problem =
        field_problem(*failure, {{"round", K::integer}, {"rank", K::integer}, {"node_rank", K::integer},
                                 {"local_rank", K::integer}, {"pid", K::int64}, {"how", K::string},
                                 {"time_ms", K::int64}, {"summary", K::string}});
    if (!problem.empty()) return "\"" + known->first + "\": failure " + problem;
  }
  return "";
}

}  // namespace cohort::launcher
