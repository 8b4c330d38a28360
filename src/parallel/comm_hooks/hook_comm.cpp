#include "hook_comm.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "parallel/sharded/ring_reduce_scatter.h"
#include "runtime/agent_link/flight_op.h"

namespace cohort::detail {
namespace {
// Send/recv tags of the hooks' rings, apart from sharded training's (which count up from 0).
constexpr uint32_t kRingTagBase = 1u << 22;
}  // namespace

void wait_for(WorkHandle& work, int rank, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw CommError(rank, std::string("DDP ") + what + " failed; a peer may have died or hung (" +
                              cause.substr(0, cause.find('\n')) + ")");
  }
}

PaddedFlat PaddedFlat::of(const at::Tensor& t, int parts) {
  const int64_t n = t.numel();
  PaddedFlat p;
  p.chunk = (n + parts - 1) / parts;
  if (p.chunk * parts == n) {
    p.flat = t.view({n});
  } else {
    p.flat = at::zeros({p.chunk * parts}, t.options());
    p.flat.narrow(0, 0, n).copy_(t.view({n}));
  }
  return p;
}

void PaddedFlat::copy_back(at::Tensor& t) const {
  if (flat.data_ptr() != t.data_ptr()) t.view({t.numel()}).copy_(flat.narrow(0, 0, t.numel()));
}

void ReducerComm::check_contiguous(const at::Tensor& t) const {
  if (!t.is_contiguous()) {
    throw ConfigError(rank(), "DDP comm hook: allreduce_sum needs a contiguous tensor (bucket " +
                                  std::to_string(bucket_) + ")");
  }
}

void GroupHookComm::allreduce_sum(at::Tensor& t) {
  check_contiguous(t);
  if (world_ == 1 || t.numel() == 0) return;
  note_handed(t);
  bytes_.fetch_add(static_cast<int64_t>(t.nbytes()), std::memory_order_relaxed);
  if (shm_ && ShmAllreduce::supports(t)) {
    shm_->allreduce_async(t, 1.0, what_, bucket_, /*gradient=*/true)->wait();
    return;
  }
  if (t.scalar_type() == at::kBFloat16 && !t.is_cuda()) {
    ring_allreduce(t);
    return;
  }
  std::vector<at::Tensor> tensors{t};
  FlightScope entry(flight_op("allreduce", what_, bucket_, t, nullptr, /*gradient=*/true));
  auto work = group_->allreduce(tensors);
  wait_for(work, rank_, "comm hook: allreduce");
  entry.done();
}

// Reduce-scatter around the ring (ring_reduce_scatter.h), then each rank's summed chunk around
// the ring to everyone: chunks are copied, so every rank ends with the same bytes.
void GroupHookComm::ring_allreduce(at::Tensor& t) {
  torch::NoGradGuard no_grad;
  const PaddedFlat padded = PaddedFlat::of(t, world_);
  at::Tensor flat = padded.flat;
  const int64_t chunk = padded.chunk;
  const uint32_t tag = kRingTagBase + 2 * (ring_calls_++ % (1u << 20));
  FlightScope entry(flight_op("allreduce", what_, bucket_, t, nullptr, /*gradient=*/true));
  try {
    ring_reduce_scatter(*group_, position_, world_, flat, tag);
    const int next = (position_ + 1) % world_, prev = (position_ + world_ - 1) % world_;
    auto part = [&](int index) { return flat.narrow(0, ((index % world_) + world_) % world_ * chunk, chunk); };
    for (int s = 0; s < world_ - 1; ++s) {
      std::vector<at::Tensor> out{part(position_ - s)}, in{part(position_ - 1 - s)};
      const int step_tag = static_cast<int>(((tag + 1) % (1u << 24)) * 64 + s);
      auto sent = group_->send(out, next, step_tag);
      auto received = group_->recv(in, prev, step_tag);
      wait_for(received, rank_, "comm hook: ring allgather");
      wait_for(sent, rank_, "comm hook: ring allgather");
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw CommError(rank_, "DDP comm hook: ring allreduce failed; a peer may have died or hung (" +
                               cause.substr(0, cause.find('\n')) + ")");
  }
  padded.copy_back(t);
  entry.done();
}

}  // namespace cohort::detail
