#include "log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace cohort::detail {
namespace {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    // stderr, one write per line: the launcher prefixes and interleaves whole lines.
    auto l = std::make_shared<spdlog::logger>("cohort", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[cohort %l] %v");
    const char* level = std::getenv("COHORT_LOG_LEVEL");
    l->set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::trace: return spdlog::level::trace;
    case LogLevel::debug: return spdlog::level::debug;
    case LogLevel::info: return spdlog::level::info;
    case LogLevel::warn: return spdlog::level::warn;
    case LogLevel::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void log(LogLevel level, const std::string& message) { logger().log(to_spdlog(level), message); }

void set_log_rank(int rank, int node_rank) {
  logger().set_pattern("[cohort %l rank " + std::to_string(rank) + " node " + std::to_string(node_rank) + "] %v");
}

}  // namespace cohort::detail
