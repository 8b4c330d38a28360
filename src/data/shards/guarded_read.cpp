// Reads of mapped shards that survive a truncation of the file. See guarded_read.h.
#include "data/shards/guarded_read.h"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace cohort::data {
namespace {

// The armed jump point of this thread, or null. initial-exec: the handler must not call into the
// dynamic linker to find it. volatile, and fenced: the compiler sees no reader of the store that
// arms it before the one that disarms it (memcpy and the loads don't read it), and would drop it.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* volatile t_guard = nullptr;

void arm(sigjmp_buf* here) {
  t_guard = here;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void disarm() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
}
struct sigaction g_previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* guard = t_guard) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);  // back into guarded_copy / guarded_touch, which return false
  }
  // Not a read of ours: what would have happened without us.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default: put it back; returning re-runs the faulting load, which now kills the process as
  // it would have (with a core dump where those are on).
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;  // NODEFER: a jump out of the handler leaves SIGBUS unblocked
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

bool guarded_copy(void* out, const void* from, size_t n) {
  install_once();
  sigjmp_buf here;
  if (sigsetjmp(here, 0) != 0) return false;  // the handler jumped: t_guard is null again
  arm(&here);
  std::memcpy(out, from, n);
  disarm();
  return true;
}

bool guarded_touch(const uint8_t* from, size_t n, size_t page) {
  install_once();
  sigjmp_buf here;
  if (sigsetjmp(here, 0) != 0) return false;
  arm(&here);
  const uintptr_t end = reinterpret_cast<uintptr_t>(from) + n;
  // The first page starts before the range (aligned down); the range's own first byte is in it.
  for (uintptr_t p = reinterpret_cast<uintptr_t>(from); p < end; p = (p & ~(page - 1)) + page) {
    (void)*reinterpret_cast<const volatile uint8_t*>(p);
  }
  disarm();
  return true;
}

}  // namespace cohort::data
