// hub/values.h — private to the hub (hub*.cpp): reading numbers, integers and strings out
// of untrusted JSON messages (non-finite numbers travel as "nan"/"inf"/"-inf" strings), writing
// them back the same way, and the small formatting and container helpers the hub's files share.
// No hub state here, and nothing about what the values mean: that is hub.cpp's business.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>

namespace cohort::hub::detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Wall-clock seconds since the epoch.
double wall_now();

/// A number, or one of the strings non-finite numbers travel as ("nan", "inf", "-inf").
std::optional<double> number(const nlohmann::json& v);
std::optional<double> number_at(const nlohmann::json& object, const char* key);
double number_or_nan(const nlohmann::json& object, const char* key);

/// A string member, or `fallback` when it is absent or not a string (inputs are never trusted).
std::string text_at(const nlohmann::json& object, const char* key, const std::string& fallback = "");

/// An integral member (a float without a fraction counts); nullopt otherwise.
std::optional<int64_t> integer_at(const nlohmann::json& object, const char* key);

/// A double as JSON the way the messages carry it: a number, or "nan"/"inf"/"-inf".
nlohmann::json value_json(double v);

/// `v` with `digits` digits after the point.
std::string fixed(double v, int digits);

template <typename T>
void trim(std::deque<T>& d, size_t limit) {
  while (d.size() > limit) d.pop_front();
}

}  // namespace cohort::hub::detail
