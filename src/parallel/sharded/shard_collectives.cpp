#include "shard_collectives.h"

#include "cohort/error.h"
#include "ring_reduce_scatter.h"
#include "runtime/agent_link/flight_op.h"
#include "runtime/torch_compat_internal.h"

namespace cohort::detail {

std::string ShardCollectives::name(ReduceScatterAlgo a) {
  switch (a) {
    case ReduceScatterAlgo::ring: return "ring";
    case ReduceScatterAlgo::allreduce_slice: return "allreduce_slice";
    case ReduceScatterAlgo::native: return "native";
    case ReduceScatterAlgo::shm: return "shm";
    default: return "automatic";
  }
}

std::string ShardCollectives::name(AllgatherAlgo a) {
  switch (a) {
    case AllgatherAlgo::backend: return "backend";
    case AllgatherAlgo::shm_allreduce: return "shm_allreduce";
    case AllgatherAlgo::shm: return "shm";
    default: return "automatic";
  }
}

ShardCollectives::ShardCollectives(c10::intrusive_ptr<Backend> group, ShmAllreduce* shm, int rank, int world,
                                   ReduceScatterAlgo rs, AllgatherAlgo ag)
    : group_(std::move(group)), shm_(shm), rank_(rank), world_(world), rs_(rs), ag_(ag) {
  const bool native = has_native_flat_collectives(*group_);
  if (rs_ == ReduceScatterAlgo::native && !native)
    throw ConfigError(rank_, "ShardedDataParallel: reduce_scatter = native, but this libtorch's " +
                                 group_->getBackendName() +
                                 " process group has no reduce_scatter; use ring or allreduce_slice");
  if (rs_ == ReduceScatterAlgo::shm && !shm_)
    throw ConfigError(rank_, "ShardedDataParallel: reduce_scatter = shm needs the shared-memory engine "
                             "(all ranks on one machine, COHORT_SHM not 0); use ring or allreduce_slice");
  if ((ag_ == AllgatherAlgo::shm_allreduce || ag_ == AllgatherAlgo::shm) && !shm_)
    throw ConfigError(rank_, "ShardedDataParallel: allgather = " + name(ag_) +
                                 " needs the shared-memory engine "
                                 "(all ranks on one machine, COHORT_SHM not 0); use backend");
  // Measured on 2 cores (docs/sharded.md, docs/BENCHMARKS.md issue 7): shared memory beats Gloo's
  // TCP for both collectives when the ranks share a machine, and its copy-only paths (fewer bytes
  // than the allreduce-based ones, bitwise the same result) were faster in most runs, by ~10-25%;
  // across machines the ring moves the fewest bytes.
  if (rs_ == ReduceScatterAlgo::automatic)
    rs_ = native ? ReduceScatterAlgo::native : shm_ ? ReduceScatterAlgo::shm : ReduceScatterAlgo::ring;
  if (ag_ == AllgatherAlgo::automatic) ag_ = shm_ ? AllgatherAlgo::shm : AllgatherAlgo::backend;
  native_ag_ = native && ag_ == AllgatherAlgo::backend;
}

void ShardCollectives::wait(WorkHandle work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw CommError(rank_, std::string("ShardedDataParallel ") + what + " failed; a peer may have died or hung (" +
                               cause.substr(0, cause.find('\n')) + ")");
  }
}

void ShardCollectives::allreduce(torch::Tensor t, double scale, bool gradient) {
  torch::NoGradGuard no_grad;
  if (world_ == 1) {
    if (scale != 1.0) t.mul_(scale);
    return;
  }
  if (shm_ && ShmAllreduce::supports(t)) {
    shm_->allreduce_async(t, scale, "sharded gradient", -1, gradient)->wait();
    return;
  }
  if (scale != 1.0) t.mul_(scale);  // before the sum, as DDP does (keeps fp16 in range)
  std::vector<torch::Tensor> tensors{t};
  FlightScope entry(flight_op("allreduce", "sharded gradient", -1, t, nullptr, gradient));
  wait(group_->allreduce(tensors), "allreduce");
  entry.done();
}

void ShardCollectives::reduce_scatter_avg(torch::Tensor flat, torch::Tensor out) {
  torch::NoGradGuard no_grad;
  const int64_t chunk = out.numel();
  switch (rs_) {
    case ReduceScatterAlgo::shm:
      if (ShmAllreduce::supports(flat) && ShmAllreduce::supports(out)) {
        shm_->reduce_scatter_async(flat, out, 1.0 / world_, "sharded gradient", -1, /*gradient=*/true)->wait();
        return;
      }
      [[fallthrough]];  // other dtypes: the allreduce path, which has its own fallback
    case ReduceScatterAlgo::allreduce_slice:
      allreduce(flat, 1.0 / world_);
      if (out.data_ptr() != flat.narrow(0, rank_ * chunk, chunk).data_ptr()) out.copy_(flat.narrow(0, rank_ * chunk, chunk));
      return;
    case ReduceScatterAlgo::native: {
      flat.div_(world_);
      FlightScope entry(flight_op("reduce_scatter", "sharded gradient", -1, flat, nullptr, /*gradient=*/true));
      wait(native_reduce_scatter(*group_, out, flat), "reduce-scatter");
      entry.done();
      return;
    }
    default: {
      flat.div_(world_);
      FlightScope entry(flight_op("reduce_scatter", "sharded gradient (ring)", -1, flat, nullptr, /*gradient=*/true));
      ring_reduce_scatter(*group_, rank_, world_, flat, tag_++);
      entry.done();
      if (out.data_ptr() != flat.narrow(0, rank_ * chunk, chunk).data_ptr()) out.copy_(flat.narrow(0, rank_ * chunk, chunk));
    }
  }
}

void ShardCollectives::allgather(torch::Tensor shard, torch::Tensor full) {
  torch::NoGradGuard no_grad;
  const int64_t chunk = shard.numel();
  auto own = full.narrow(0, rank_ * chunk, chunk);
  if (world_ == 1) {
    if (own.data_ptr() != shard.data_ptr()) own.copy_(shard);
    return;
  }
  if (ag_ == AllgatherAlgo::shm && ShmAllreduce::supports(full)) {
    if (own.data_ptr() != shard.data_ptr()) own.copy_(shard);
    shm_->allgather_async(full, "sharded parameters")->wait();
    return;
  }
  if (ag_ == AllgatherAlgo::shm_allreduce || ag_ == AllgatherAlgo::shm) {  // the reference (and other dtypes)
    if (own.data_ptr() != shard.data_ptr()) own.copy_(shard);
    if (rank_ > 0) full.narrow(0, 0, rank_ * chunk).zero_();
    if (rank_ + 1 < world_) full.narrow(0, (rank_ + 1) * chunk, (world_ - rank_ - 1) * chunk).zero_();
    shm_->allreduce_async(full, 1.0, "sharded allgather")->wait();
    return;
  }
  torch::Tensor input = shard.detach();
  if (input.data_ptr() == own.data_ptr()) input = input.clone();  // Gloo reads and writes: keep them apart
  FlightScope entry(flight_op("allgather", "sharded parameters", -1, full));
  if (native_ag_) {
    wait(native_allgather(*group_, full, input), "allgather");
    entry.done();
    return;
  }
  std::vector<torch::Tensor> inputs{input};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < world_; ++r) outputs[0].push_back(full.narrow(0, r * chunk, chunk));
  wait(group_->allgather(outputs, inputs), "allgather");
  entry.done();
}

}  // namespace cohort::detail
