// GradReducer's communication-hook path (grad_reducer.h): the buckets handed to the hook, the
// tasks on the communication thread, the used flags' sum, and their errors.
#include <sstream>

#include "cohort/error.h"
#include "grad_reducer.h"

namespace cohort::detail {

namespace {
// PyTorch's default hook: divide by the world size, then sum (what the flat path does).
class AveragingHook final : public CommHook {
 public:
  std::string describe() const override { return "allreduce"; }
  at::Tensor run(GradBucket& bucket, HookComm& comm) override {
    bucket.buffer.div_(comm.world_size());
    comm.allreduce_sum(bucket.buffer);
    return bucket.buffer;
  }
};
}  // namespace

void GradReducer::setup_hook(std::unique_ptr<ReducerComm> comm) {
  hook_ = options_.comm_hook ? options_.comm_hook : std::make_shared<AveragingHook>();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    GradBucket g;
    g.index = static_cast<int>(k);
    g.buffer = b.flat.narrow(0, 0, b.numel);
    for (size_t i = 0; i < b.params.size(); ++i) {
      const auto& param = params_[b.params[i]];
      g.gradients.push_back(b.flat.narrow(0, b.offset[i], param.tensor.numel()).view(param.tensor.sizes()));
      g.names.push_back(param.name);
    }
    g.is_last = k + 1 == buckets_.size();
    hook_input_bytes_ += static_cast<int64_t>(g.buffer.nbytes());
    hook_buckets_.push_back(std::move(g));
  }
  hook_->check(hook_buckets_, rank_);
  hook_comm_ = comm ? std::move(comm) : std::make_unique<GroupHookComm>(group_, shm_, rank_, world_);
  hook_queue_ = std::make_unique<CommQueue>();
}

void GradReducer::launch_hook(size_t k) {
  buckets_[k].hook_work = hook_queue_->submit([this, k] {
    torch::NoGradGuard no_grad;
    GradBucket& g = hook_buckets_[k];
    hook_comm_->set_bucket(static_cast<int>(k));
    const at::Tensor out = hook_->run(g, *hook_comm_);
    if (!out.defined() || out.dim() != 1 || out.numel() != g.buffer.numel() ||
        out.scalar_type() != g.buffer.scalar_type() || out.device() != g.buffer.device()) {
      std::ostringstream os;
      os << "DDP comm hook '" << hook_->describe() << "' returned ";
      if (out.defined()) {
        os << "a " << out.sizes() << " " << out.scalar_type() << " tensor on " << out.device();
      } else {
        os << "an undefined tensor";
      }
      os << " for bucket " << k << " (" << g.names.front() << (g.names.size() > 1 ? ", ..." : "")
         << "); it must return the bucket's average: a [" << g.buffer.numel() << "] " << g.buffer.scalar_type()
         << " tensor on " << g.buffer.device();
      throw ConfigError(rank_, os.str());
    }
    if (out.data_ptr() != g.buffer.data_ptr()) g.buffer.copy_(out);
  });
}

// The used flags of every bucket in one sum, after the last bucket (the hooks see gradients only).
void GradReducer::launch_hook_flags() {
  if (world_ == 1) {
    hook_flags_ = hook_queue_->submit([] {});
    return;
  }
  hook_flags_ = hook_queue_->submit([this] {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> tails;
    for (auto& b : buckets_) tails.push_back(b.flat.narrow(0, b.numel, static_cast<int64_t>(b.params.size())).to(torch::kFloat));
    torch::Tensor flags = torch::cat(tails);
    hook_comm_->set_bucket(-1);
    hook_comm_->allreduce_sum(flags);
    int64_t offset = 0;
    for (auto& b : buckets_) {
      const auto n = static_cast<int64_t>(b.params.size());
      b.flat.narrow(0, b.numel, n).copy_(flags.narrow(0, offset, n));
      offset += n;
    }
  });
}

void GradReducer::wait_hook(std::shared_future<void>& work, const std::string& what) {
  try {
    work.get();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw Error(rank_, "DDP comm hook '" + hook_->describe() + "' failed on " + what + ": " +
                           cause.substr(0, cause.find('\n')));
  }
}

}  // namespace cohort::detail
