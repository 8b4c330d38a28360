// runtime/check.h — COHORT_CHECK: invariant checks inside cohort (not part of the public API).
#pragma once

#include <sstream>
#include <string>

namespace cohort::detail {
/// Throws cohort::Error with the expression, the place and the message (src/runtime/error.cpp).
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);
}  // namespace cohort::detail

/// Invariant check for states that cannot happen unless cohort has a bug.
#define COHORT_CHECK(cond, msg_stream)                                         \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::ostringstream cohort_check_os_;                                     \
      cohort_check_os_ << msg_stream;                                          \
      ::cohort::detail::check_failed(#cond, __FILE__, __LINE__, cohort_check_os_.str()); \
    }                                                                          \
  } while (0)
