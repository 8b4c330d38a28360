// "30 s", "2 s", "0.5 s": durations as error messages print them. Internal header.
#pragma once

#include <chrono>
#include <cmath>
#include <sstream>
#include <string>

namespace cohort::detail {

inline std::string seconds_text(double s) {
  std::ostringstream os;
  if (s == std::floor(s)) {
    os << static_cast<long long>(s);
  } else {
    os << s;
  }
  os << " s";
  return os.str();
}

inline std::string seconds_text(std::chrono::milliseconds ms) { return seconds_text(static_cast<double>(ms.count()) / 1000.0); }

}  // namespace cohort::detail
