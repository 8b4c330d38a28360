// The one logger, every line prefixed with the rank: "[cohort info rank 1 node 0] ...".
// Quiet by default (warnings and errors); COHORT_LOG_LEVEL=info|debug|trace makes it verbose.
// spdlog does the work behind this small interface, so that its headers stay out of torch code.
// Internal header.
#pragma once

#include <string>

namespace cohort::detail {

enum class LogLevel { trace, debug, info, warn, error };

void log(LogLevel level, const std::string& message);
inline void log_info(const std::string& m) { log(LogLevel::info, m); }
inline void log_warn(const std::string& m) { log(LogLevel::warn, m); }
/// Re-prefixes every following line with this rank (called once the rank is known).
void set_log_rank(int rank, int node_rank);

}  // namespace cohort::detail
