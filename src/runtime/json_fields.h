// runtime/json_fields.h — numbers in JSON that came from outside this process (a socket, a file
// on disk). nlohmann's get<int>() converts whatever it finds: 1e300 becomes INT64_MIN, 2^32 wraps,
// "x" throws a type_error deep in a handler. These say instead whether a value is an integer in
// the range the reader means, or name the field that is not. And text itself from outside: a depth
// cap while parsing, and a dump that does not throw on bytes that are not UTF-8. Internal header,
// no torch.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cohort::detail {

/// How deep JSON from outside may nest. nlohmann parses any depth, but copying or dumping a value
/// recurses once a level: 100,000 nested arrays (200 KB) overflow the stack (SIGSEGV).
inline constexpr int kMaxJsonDepth = 64;

/// Json::parse of [first, last) with nesting capped at kMaxJsonDepth: too deep is a
/// Json::parse_error "... nested deeper than 64 levels", so a caller's handling of bad syntax
/// (catch, or is_discarded() below) covers it too. `too_deep`, when given, tells the two apart.
template <class Json = nlohmann::json, class It>
Json parse_capped(It first, It last, bool* too_deep = nullptr) {
  using Event = typename Json::parse_event_t;
  const auto cap = [too_deep](int depth, Event event, Json&) {  // depth: the levels around this one
    if ((event == Event::array_start || event == Event::object_start) && depth >= kMaxJsonDepth) {
      if (too_deep) *too_deep = true;
      throw Json::parse_error::create(101, 0, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", nullptr);
    }
    return true;
  };
  return Json::parse(first, last, cap);
}
template <class Json = nlohmann::json>
Json parse_capped(std::string_view text, bool* too_deep = nullptr) {
  return parse_capped<Json>(text.begin(), text.end(), too_deep);
}

/// parse_capped that returns a discarded value (is_discarded()) instead of throwing, like
/// Json::parse(..., nullptr, false). `problem`, when given, gets what to say after "is":
/// "nested deeper than 64 levels" or "not JSON".
template <class Json = nlohmann::json, class It>
Json parse_capped_or_discarded(It first, It last, std::string* problem = nullptr) {
  bool too_deep = false;
  try {
    return parse_capped<Json>(first, last, &too_deep);
  } catch (const nlohmann::json::exception&) {
    if (problem) *problem = too_deep ? "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels" : "not JSON";
    return Json(Json::value_t::discarded);
  }
}
template <class Json = nlohmann::json>
Json parse_capped_or_discarded(std::string_view text, std::string* problem = nullptr) {
  return parse_capped_or_discarded<Json>(text.begin(), text.end(), problem);
}

/// j.dump(indent) that writes U+FFFD for bytes that are not UTF-8 instead of throwing
/// type_error.316: strings cohort does not control (file names, metadata, metric names, worker
/// output) may hold any bytes.
template <class Json>
std::string dump_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

/// Whether `v` is an integer (not a float, not a string) within [lo, hi].
inline bool is_integer_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {  // nlohmann parses every non-negative integer as unsigned
    const uint64_t u = v.get<uint64_t>();
    return hi >= 0 && u <= static_cast<uint64_t>(hi) && (lo <= 0 || u >= static_cast<uint64_t>(lo));
  }
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

/// j[key] as an integer within [lo, hi]; throws std::runtime_error naming the key when it is
/// absent, of another kind or out of range.
inline int64_t integer_field(const nlohmann::json& j, const char* key, int64_t lo,
                             int64_t hi = std::numeric_limits<int64_t>::max()) {
  auto it = j.find(key);
  if (it == j.end()) throw std::runtime_error(std::string("has no \"") + key + "\"");
  if (!is_integer_in(*it, lo, hi)) {
    throw std::runtime_error(std::string("has \"") + key + "\": " + it->dump().substr(0, 40) +
                             ", not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
}

}  // namespace cohort::detail
