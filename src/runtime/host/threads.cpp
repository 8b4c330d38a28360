#include "cohort/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace cohort {

void set_num_threads(int threads) {
  if (threads <= 0) return;
  at::set_num_threads(threads);
  // Looked up at run time: the BLAS behind libblas.so.3 is chosen by the machine's alternatives.
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(threads);
}

}  // namespace cohort
