// The job clock's measurement over the process group. See clock_sync.h.
#include "clock_sync.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

namespace cohort::detail {
namespace {
constexpr int kClockTag = 0x6c6b;  // "lk": apart from the pipeline's tags 0 and 1
}  // namespace

ClockOffset sync_job_clock(Backend& group, int rank, int world_size, int rounds) {
  ClockOffset result;
  if (world_size <= 1) {
    result.measured_ns = own_clock_ns();
    set_clock_offset(result);
    return result;
  }
  auto buf = at::zeros({1}, at::kLong);
  std::vector<at::Tensor> tensors{buf};
  if (rank == 0) {
    for (int peer = 1; peer < world_size; ++peer) {
      for (int k = 0; k < rounds; ++k) {
        group.recv(tensors, peer, kClockTag)->wait();
        buf.data_ptr<int64_t>()[0] = own_clock_ns();  // between the ping's arrival and the answer
        group.send(tensors, peer, kClockTag)->wait();
      }
    }
    result.measured_ns = own_clock_ns();
  } else {
    int64_t best_rtt = std::numeric_limits<int64_t>::max();
    for (int k = 0; k < rounds; ++k) {
      const int64_t sent = own_clock_ns();
      group.send(tensors, 0, kClockTag)->wait();
      group.recv(tensors, 0, kClockTag)->wait();
      const int64_t back = own_clock_ns();
      const int64_t stamp = buf.data_ptr<int64_t>()[0];
      if (back - sent < best_rtt) {
        best_rtt = back - sent;
        // In seconds of integers first: the clocks' nanoseconds are too large for a double's sum.
        result.offset_s = static_cast<double>(stamp - sent - (back - sent) / 2) / 1e9;
        result.error_s = static_cast<double>(back - sent) / 2e9;
      }
    }
    result.measured_ns = own_clock_ns();
  }
  set_clock_offset(result);
  return result;
}

}  // namespace cohort::detail
