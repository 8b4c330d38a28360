// runtime/json_fields.h — numbers in JSON that came from outside this process (a socket, a file
// on disk). nlohmann's get<int>() converts whatever it finds: 1e300 becomes INT64_MIN, 2^32 wraps,
// "x" throws a type_error deep in a handler. These say instead whether a value is an integer in
// the range the reader means, or name the field that is not. Internal header, no torch.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace cohort::detail {

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
