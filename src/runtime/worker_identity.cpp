// The process's worker identity. See worker_identity.h.
#include "runtime/worker_identity.h"

#include <mutex>

namespace cohort::detail {
namespace {
std::mutex g_mu;  // init() writes once; the monitor reads from its own threads
std::optional<WorkerIdentity> g_identity;
}  // namespace

void record_process_identity(const WorkerIdentity& who) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_identity = who;
}

std::optional<WorkerIdentity> process_identity() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_identity;
}

}  // namespace cohort::detail
