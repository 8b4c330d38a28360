// Background work at the lowest CPU priority: the in-memory snapshot's writer thread, and warm
// spares while they load (libtorch, the program's data) before their round needs them.
//
// Why: a job trains with one busy thread per core, so any CPU that background work takes is taken
// from training, and the ranks meet at every allreduce, so a delay on one core delays them all.
// At nice 19 (weight 15 against 1024 at nice 0) the work runs in the gaps where a training thread
// waits; where there are none, it still finishes: a snapshot whose commit the next one waits for,
// or a spare that the next failure needs, is waited for, and a waiting thread frees its core.
//
// Linux keeps a nice value per thread (setpriority(PRIO_PROCESS, tid)). Lowering is always
// allowed; returning a thread to a lower nice value needs CAP_SYS_NICE or an RLIMIT_NICE that
// permits it, so a spare is started low only where it can come back (can_return_to_nice).
// Internal header (cohort_base: no torch; the launcher uses it too).
#pragma once

#include <string>

namespace cohort::detail {

/// The nice value of background work.
inline constexpr int kBackgroundNice = 19;

/// The calling thread's nice value.
int this_thread_nice();

/// Lowers the calling thread to kBackgroundNice. Best effort: a failure leaves it as it was.
void lower_this_thread_priority();

/// Whether this process may set a thread from kBackgroundNice back to `nice`: CAP_SYS_NICE, or an
/// RLIMIT_NICE of at least 20 - nice (setpriority(2)).
bool can_return_to_nice(int nice);

/// Sets every thread of this process to `nice` (those that exist now: /proc/self/task). Returns
/// an empty string, or what failed.
std::string set_process_nice(int nice);

}  // namespace cohort::detail
