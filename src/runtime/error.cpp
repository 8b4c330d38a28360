// Invariant failures (COHORT_CHECK): a bug in cohort, reported with where and what.
#include "cohort/error.h"
#include "runtime/check.h"

namespace cohort::detail {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw std::logic_error(std::string("cohort internal check failed: ") + expr + " at " + file + ":" +
                         std::to_string(line) + (msg.empty() ? "" : " — " + msg) +
                         " (please report this)");
}

}  // namespace cohort::detail
