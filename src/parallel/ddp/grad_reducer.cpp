// GradReducer — see grad_reducer.h for the flush rule.
#include "grad_reducer.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>

#include "parallel/autograd_hooks.h"
#include "cohort/error.h"
#include "runtime/agent_link/flight_op.h"
#include "runtime/agent_link/progress.h"
#include "runtime/check.h"

namespace cohort::detail {

std::shared_ptr<GradReducer> GradReducer::create(std::vector<Param> params, c10::intrusive_ptr<Backend> group,
                                                 ShmAllreduce* shm, int rank, int world_size,
                                                 const DDPOptions& options, StepMonitor* monitor,
                                                 std::unique_ptr<ReducerComm> comm) {
  std::shared_ptr<GradReducer> r(new GradReducer(std::move(params), std::move(group), shm, rank, world_size, options,
                                                 monitor, std::move(comm)));
  r->attach_hooks();  // needs shared_from_this, so not in the constructor
  return r;
}

GradReducer::GradReducer(std::vector<Param> params, c10::intrusive_ptr<Backend> group, ShmAllreduce* shm, int rank,
                         int world_size, const DDPOptions& options, StepMonitor* monitor,
                         std::unique_ptr<ReducerComm> comm)
    : params_(std::move(params)),
      group_(std::move(group)),
      shm_(shm),
      rank_(rank),
      world_(world_size),
      options_(options),
      monitor_(monitor) {
  // Written so that NaN fails too (every comparison with it is false); inf would overflow the byte cap.
  const auto positive_mb = [](double mb) { return mb > 0 && mb <= (1 << 20); };
  if (!positive_mb(options_.bucket_cap_mb) || !positive_mb(options_.first_bucket_cap_mb)) {
    throw ConfigError(rank_, "DDP bucket_cap_mb and first_bucket_cap_mb must be positive MiB up to 1 TiB (bucket_cap_mb " +
                                 std::to_string(options_.bucket_cap_mb) + ", first_bucket_cap_mb " +
                                 std::to_string(options_.first_bucket_cap_mb) + ")");
  }
  for (const auto& p : params_) {
    if (p.tensor.is_sparse()) throw ConfigError(rank_, "DDP does not support sparse parameter '" + p.name + "'");
  }
  slots_.resize(params_.size());
  if (!options_.reference_mode) build_buckets();
  stats_.num_buckets = static_cast<int64_t>(buckets_.size());
  if (monitor_ && rank_ == 0 && !buckets_.empty()) report_buckets();
  if (options_.comm_hook || comm) {
    if (options_.reference_mode) throw ConfigError(rank_, "DDP: a comm_hook and reference_mode cannot be combined");
    stats_.hierarchical = comm != nullptr;
    setup_hook(std::move(comm));
  }
}

GradReducer::~GradReducer() {
  for (auto& s : slots_) {
    if (s.accumulator && s.hook_key) s.accumulator->del_post_hook(s.hook_key);
  }
}

void GradReducer::build_buckets() {
  const auto cap = [&](bool first) {
    return static_cast<int64_t>((first ? std::min(options_.first_bucket_cap_mb, options_.bucket_cap_mb)
                                       : options_.bucket_cap_mb) *
                                1024 * 1024);
  };
  // Reverse registration order approximates the order in which backward produces gradients.
  // A bucket holds one dtype and device; it closes once it holds its cap or more, as PyTorch's
  // compute_bucket_assignment_by_size does. (Closing before a gradient that would overflow it
  // instead put a large early gradient — the CNN's fc1, 1.6 MB against the first cap of 1 MiB —
  // at the head of the next bucket, which then waited for the end of backward: no overlap.)
  Bucket current;
  int64_t bytes = 0;
  auto close = [&]() {
    if (current.params.empty()) return;
    const auto& t = params_[current.params.front()].tensor;
    current.flat = torch::zeros({current.numel + static_cast<int64_t>(current.params.size())}, t.options());
    // Pinned beside a CUDA bucket, so that launching copies the flags without waiting for the
    // stream (a copy from pageable memory synchronises it: once per bucket, inside backward).
    current.used = torch::zeros({static_cast<int64_t>(current.params.size())},
                                torch::TensorOptions().dtype(torch::kFloat).pinned_memory(t.is_cuda()));
    current.kept.resize(current.params.size());
    for (size_t k = 0; k < current.params.size(); ++k) {
      slots_[current.params[k]].bucket = buckets_.size();
      slots_[current.params[k]].index = k;
    }
    buckets_.push_back(std::move(current));
    current = Bucket{};
    bytes = 0;
  };
  for (size_t i = params_.size(); i-- > 0;) {
    const auto& t = params_[i].tensor;
    if (!current.params.empty()) {
      const auto& first = params_[current.params.front()].tensor;
      if (first.scalar_type() != t.scalar_type() || first.device() != t.device()) close();
    }
    current.params.push_back(i);
    current.offset.push_back(current.numel);
    current.numel += t.numel();
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
    if (bytes >= cap(buckets_.empty())) close();
  }
  close();
}

// The plan's real bucket sizes, once, from rank 0 (the same on every rank): `cohort sim calibrate`
// reads the first one's bytes instead of assuming the cap (a first bucket closes past its cap).
void GradReducer::report_buckets() {
  int64_t first = 0, total = 0;
  for (const auto& b : buckets_) {
    const int64_t n = b.numel * static_cast<int64_t>(params_[b.params.front()].tensor.element_size());
    if (total == 0) first = n;
    total += n;
  }
  const auto mib = [](int64_t n) { return std::to_string(static_cast<double>(n) / 1048576.0).substr(0, 5); };
  const size_t count = buckets_.size();
  monitor_->send_event("ddp_buckets", 0,
                       "DDP: " + std::to_string(count) + " gradient bucket" + (count == 1 ? "" : "s") + ", " + mib(total) +
                           " MiB, the first " + mib(first) + " MiB",
                       "{\"buckets\":" + std::to_string(count) + ",\"first_bytes\":" + std::to_string(first) +
                           ",\"total_bytes\":" + std::to_string(total) + "}");
}

void GradReducer::attach_hooks() {
  std::weak_ptr<GradReducer> weak = shared_from_this();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].tensor);
    COHORT_CHECK(acc != nullptr, "parameter " << params_[i].name << " has no gradient accumulator");
    slots_[i].hook_key = acc->add_post_hook(std::make_unique<GradReadyHook>([weak, i] {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    }));
    slots_[i].accumulator = std::move(acc);
  }
}

void GradReducer::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = enabled;
}

bool GradReducer::sync_enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sync_;
}

DDPStats GradReducer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<std::vector<std::string>> GradReducer::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t p : b.params) out.back().push_back(params_[p].name);
  }
  return out;
}

void GradReducer::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[index];
  if (!sync_) {
    slot.accumulated = true;  // stays local until the next synchronised backward
    return;
  }
  if (!in_backward_) begin_iteration();
  if (slot.fired) {
    // The engine drops its queued callbacks when a hook throws: reset here, or the next backward
    // would think this one is still running.
    reset_iteration();
    throw ConfigError(rank_, "DDP: parameter '" + params_[index].name +
                                 "' received its gradient twice in one backward pass; re-entrant or "
                                 "retain_graph backward through DDP is not supported");
  }
  slot.fired = true;
  if (options_.reference_mode) return;  // everything happens at the end of backward
  copy_into_bucket(index, true);
  Bucket& bucket = buckets_[slot.bucket];
  if (--bucket.pending == 0) launch_ready_buckets(/*from_hook=*/true);
}

void GradReducer::reset_iteration() {
  in_backward_ = false;
  for (auto& s : slots_) s.fired = s.accumulated = false;
}

void GradReducer::begin_iteration() {
  in_backward_ = true;
  next_bucket_ = 0;
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.shm_work.reset();
    b.flight_seq = 0;
    b.hook_work = {};
  }
  hook_flags_ = {};
  // Runs once the whole backward pass is done, on the thread that finishes it.
  std::weak_ptr<GradReducer> weak = shared_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto self = weak.lock()) {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->options_.reference_mode) {
        self->finish_reference();
      } else {
        self->finish_iteration();
      }
    }
  });
}

// After the first synchronised backward, each gradient is an alias of its bucket region (see
// alias_of): AccumulateGrad then adds straight into the bucket and nothing is copied here.
void GradReducer::copy_into_bucket(size_t index, bool used) {
  const Slot& slot = slots_[index];
  Bucket& bucket = buckets_[slot.bucket];
  const auto& param = params_[index].tensor;
  auto region = bucket.flat.narrow(0, bucket.offset[slot.index], param.numel());
  const auto& grad = param.grad();
  const bool aliased = grad.defined() && grad.data_ptr() == region.data_ptr();
  if (used && grad.defined()) {
    if (!aliased) region.view(param.sizes()).copy_(grad);
  } else {
    // Contributes zeros. An aliased gradient is kept aside, in case no rank used it and it must
    // stay as it was.
    if (aliased) bucket.kept[slot.index] = grad.clone();
    region.zero_();
    used = false;
  }
  bucket.used.data_ptr<float>()[slot.index] = used ? 1.0f : 0.0f;
}

// A tensor sharing the bucket's storage at `region`, but not an autograd view: optimizers may
// detach_() and zero_() it (libtorch 1.13's zero_grad does), which a view would refuse.
static torch::Tensor alias_of(const torch::Tensor& flat, int64_t offset, const torch::Tensor& param) {
  std::vector<int64_t> strides(param.dim(), 1);
  for (int64_t d = param.dim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * param.size(d + 1);
  return torch::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset() + offset, param.sizes(), strides);
}

void GradReducer::launch_ready_buckets(bool from_hook) {
  // Strictly in bucket order, so every rank issues the same collectives in the same order.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    const auto k = static_cast<int32_t>(next_bucket_);
    Bucket& b = buckets_[next_bucket_++];
    // Asynchronous from pinned memory: `used` is next written in the next iteration, after finish
    // read the flags back from `flat` (which waits for this copy). With a hook, whose work may run
    // on another stream, the copy completes first.
    b.flat.narrow(0, b.numel, b.used.numel()).copy_(b.used, /*non_blocking=*/b.flat.is_cuda() && !hook_);
    (from_hook ? stats_.buckets_launched_in_backward : stats_.buckets_launched_at_end)++;
    if (hook_) {  // also alone: a hook may change the result (PowerSGD), so 1 rank is like W ranks
      launch_hook(k);
      stats_.bytes_allreduced += b.numel * static_cast<int64_t>(b.flat.element_size());
      continue;
    }
    if (world_ == 1) continue;  // alone: the bucket already holds the average and the used flags
    if (shm_ && ShmAllreduce::supports(b.flat)) {
      // averages within its sum pass
      b.shm_work = shm_->allreduce_async(b.flat, 1.0 / world_, "ddp bucket", k, /*gradient=*/true);
    } else {
      b.flat.div_(world_);  // average before summing, as PyTorch does (keeps fp16 in range)
      std::vector<torch::Tensor> tensors{b.flat};
      b.flight_seq = flight_record(flight_op("allreduce", "ddp bucket", k, b.flat, nullptr, /*gradient=*/true));
      b.work = group_->allreduce(tensors);
      if (!b.flat.is_cuda()) {  // Gloo's own completion, for the timeline's bucket span (a wait may come much later)
        b.work->getFuture()->addCallback([seq = b.flight_seq](c10::ivalue::Future& f) {
          flight_update(seq, f.hasError() ? FlightState::failed : FlightState::completed);
        });
      }
    }
    stats_.bytes_allreduced += b.flat.numel() * static_cast<int64_t>(b.flat.element_size());
    stats_.bytes_on_wire += b.flat.numel() * static_cast<int64_t>(b.flat.element_size());
  }
  if (hook_ && next_bucket_ == buckets_.size() && !hook_flags_.valid()) launch_hook_flags();
}

void GradReducer::wait(Bucket& bucket) {
  if (bucket.hook_work.valid()) {
    wait_hook(bucket.hook_work, "bucket " + std::to_string(&bucket - buckets_.data()));
    return;
  }
  if (!bucket.work && !bucket.shm_work) return;  // a world of one communicates nothing
  if (bucket.shm_work) {
    bucket.shm_work->wait();  // throws CommError naming the timeout itself
  } else {
    flight_update(bucket.flight_seq, FlightState::started);  // Gloo's progress is not visible: we wait from here
    try {
      wait(bucket.work, "gradient allreduce");
    } catch (...) {
      flight_update(bucket.flight_seq, FlightState::failed);
      throw;
    }
    flight_update(bucket.flight_seq, FlightState::completed);
  }
}

void GradReducer::wait(WorkHandle& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    std::string cause = e.what();
    throw CommError(rank_, std::string("DDP ") + what + " failed; a peer may have died or hung (" +
                               cause.substr(0, cause.find('\n')) + ")");
  }
}

void GradReducer::finish_iteration() {
  OnExit reset{[this] { reset_iteration(); }};
  if (monitor_) monitor_->mark(Phase::comm_wait);  // backward compute ends here
  // Complete the buckets whose parameters got no gradient in this backward: a gradient
  // accumulated under no_sync still counts; otherwise the parameter contributes zeros.
  for (auto& b : buckets_) {
    if (b.pending == 0) continue;
    for (size_t p : b.params) {
      if (!slots_[p].fired) copy_into_bucket(p, slots_[p].accumulated);
    }
    b.pending = 0;
  }
  launch_ready_buckets(/*from_hook=*/false);

  torch::NoGradGuard no_grad;
  if (hook_) {
    // Every task of this iteration finished before anything throws: none may outlive the backward.
    std::exception_ptr first;
    for (auto& b : buckets_) {
      try {
        wait(b);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    try {
      if (hook_flags_.valid()) wait_hook(hook_flags_, "the used-parameter flags");
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    if (first) std::rethrow_exception(first);
    stats_.bytes_on_wire = hook_comm_->bytes();
    const int64_t handed = hook_comm_->handed();
    if (monitor_ && world_ > 1 && options_.comm_hook) monitor_->add_hook_bytes(hook_input_bytes_, handed - hook_handed_seen_);
    hook_handed_seen_ = handed;
  }
  for (auto& b : buckets_) wait(b);
  // Every bucket's used flags in one host copy: on a GPU each copy to the host waits for the device.
  std::vector<torch::Tensor> tails;
  tails.reserve(buckets_.size());
  for (auto& b : buckets_) tails.push_back(b.flat.narrow(0, b.numel, static_cast<int64_t>(b.params.size())).to(torch::kFloat));
  const auto used = tails.empty() ? torch::empty({0}) : (tails.size() == 1 ? tails[0] : torch::cat(tails)).to(torch::kCPU).contiguous();
  const float* used_by = used.data_ptr<float>();
  for (auto& b : buckets_) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      auto& param = params_[b.params[k]].tensor;
      if (used_by[k] <= 0) {  // no rank used it: its gradient stays as it was
        if (b.kept[k].defined()) param.mutable_grad().copy_(b.kept[k]);
        b.kept[k] = torch::Tensor();
        continue;
      }
      b.kept[k] = torch::Tensor();
      const auto& grad = param.grad();
      const void* region = static_cast<char*>(b.flat.data_ptr()) + b.offset[k] * b.flat.element_size();
      if (!grad.defined() || grad.data_ptr() != region) {
        param.mutable_grad() = alias_of(b.flat, b.offset[k], param);  // the average is already there
      }
    }
    used_by += b.params.size();
  }
  stats_.sync_iterations++;
  note_ddp_iteration();  // the agent's progress counter (heartbeats, --hang-timeout)
  if (monitor_) {
    monitor_->mark(Phase::optimizer);  // communication is done
    if (monitor_->wants_grad_norm()) {
      // The averaged gradients, without the used-flag tails. Parameters no rank used hold zeros
      // here (their own gradients stay as they were) and add nothing.
      std::vector<torch::Tensor> averaged;
      averaged.reserve(buckets_.size());
      for (auto& b : buckets_) averaged.push_back(b.flat.narrow(0, 0, b.numel));
      check_grad_norm(averaged);
    }
  }
}

// The norm of all `averaged` tensors together; the monitor's verdict on it: AnomalyError (stop,
// thrown from backward), or drop every gradient (skip).
void GradReducer::check_grad_norm(const std::vector<torch::Tensor>& averaged) {
  if (averaged.empty()) return;
  const auto begin = std::chrono::steady_clock::now();
  OnExit count{[&] {
    monitor_->add_overhead_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin).count());
  }};
  std::vector<torch::Tensor> norms;
  norms.reserve(averaged.size());
  for (const auto& t : averaged) norms.push_back(t.norm().to(torch::kFloat));
  const double norm = (norms.size() == 1 ? norms[0] : torch::stack(norms).norm()).item<double>();
  if (monitor_->check_grad_norm(norm, rank_)) {
    // on_nan=skip: libtorch's optimizers skip parameters without a gradient, on every rank alike.
    for (auto& p : params_) p.tensor.mutable_grad() = torch::Tensor();
  }
}

void GradReducer::finish_reference() {
  OnExit reset{[this] { reset_iteration(); }};
  if (monitor_) monitor_->mark(Phase::comm_wait);
  torch::NoGradGuard no_grad;
  // One flag per parameter first, so that a parameter no rank used keeps its gradient.
  std::vector<float> local_used(params_.size(), 0.0f);
  for (size_t i = 0; i < params_.size(); ++i) {
    if ((slots_[i].fired || slots_[i].accumulated) && params_[i].tensor.grad().defined()) local_used[i] = 1;
  }
  // On the parameters' device: the process group for CUDA tensors (NCCL) takes no CPU tensors.
  std::vector<torch::Tensor> flags{
      torch::from_blob(local_used.data(), {static_cast<int64_t>(local_used.size())}, torch::kFloat)
          .to(params_.front().tensor.device(), /*non_blocking=*/false, /*copy=*/true)};
  FlightScope flags_entry(flight_op("allreduce", "ddp used flags", -1, flags[0]));
  auto work = group_->allreduce(flags);
  wait(work, "allreduce of used-parameter flags");
  flags_entry.done();
  const auto used = flags[0].cpu();
  const float* used_by = used.data_ptr<float>();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (used_by[i] <= 0) continue;
    auto& param = params_[i].tensor;
    const bool local = (slots_[i].fired || slots_[i].accumulated) && param.grad().defined();
    torch::Tensor grad = local ? param.grad() : torch::zeros_like(param);
    grad.div_(world_);
    std::vector<torch::Tensor> tensors{grad};
    FlightScope entry(flight_op("allreduce", "ddp reference gradient", static_cast<int32_t>(i), grad, nullptr,
                                /*gradient=*/true));
    auto w = group_->allreduce(tensors);
    wait(w, "gradient allreduce");
    entry.done();
    if (!local) param.mutable_grad() = grad;
    stats_.bytes_allreduced += grad.numel() * static_cast<int64_t>(grad.element_size());
    stats_.bytes_on_wire += grad.numel() * static_cast<int64_t>(grad.element_size());
  }
  stats_.sync_iterations++;
  note_ddp_iteration();
  if (monitor_) {
    monitor_->mark(Phase::optimizer);
    if (monitor_->wants_grad_norm()) {
      std::vector<torch::Tensor> averaged;
      for (size_t i = 0; i < params_.size(); ++i)
        if (used_by[i] > 0 && params_[i].tensor.grad().defined()) averaged.push_back(params_[i].tensor.grad());
      check_grad_norm(averaged);
    }
  }
}

}  // namespace cohort::detail
