// JSON value helpers of the hub. See hub/values.h. Nothing here knows a message's layout.
#include "hub/values.h"

#include <chrono>
#include <cmath>
#include <sstream>

namespace cohort::hub::detail {

using nlohmann::json;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<double> number(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan" || s == "NaN" || s == "-nan") return kNaN;
    if (s == "inf" || s == "+inf" || s == "Inf" || s == "+Inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Inf") return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

std::optional<double> number_at(const json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  return number(*it);
}

std::string text_at(const json& object, const char* key, const std::string& fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double number_or_nan(const json& object, const char* key) { return number_at(object, key).value_or(kNaN); }

json value_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::optional<int64_t> integer_at(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e18) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return it->get<int64_t>();
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

}  // namespace cohort::hub::detail
