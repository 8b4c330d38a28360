// cohort/threads.h — one knob for a rank's compute threads.
#pragma once

namespace cohort {

/// Sets libtorch's intra-op threads and, when libtorch's BLAS is OpenBLAS (Debian's libblas.so.3
/// alternative), OpenBLAS's own thread count, which libtorch does not control. Without this, every
/// rank's OpenBLAS starts one thread per core and ranks on one machine oversubscribe it.
void set_num_threads(int threads);

}  // namespace cohort
