// The cast-to-16-bit hooks and comm_hook_by_name (cohort/comm_hook.h).
#include <torch/torch.h>

#include <stdexcept>

#include "cohort/comm_hook.h"
#include "cohort/error.h"

namespace cohort {
namespace {

class CastHook final : public CommHook {
 public:
  CastHook(at::ScalarType wire, const char* name) : wire_(wire), name_(name) {}
  std::string describe() const override { return name_; }

  void check(const std::vector<GradBucket>& buckets, int rank) const override {
    for (const auto& b : buckets) {
      if (!at::isFloatingType(b.buffer.scalar_type())) {
        throw ConfigError(rank, std::string("DDP comm hook '") + name_ + "' cannot compress bucket " +
                                    std::to_string(b.index) + " (" + b.names.front() + ", ...): its gradients are " +
                                    c10::toString(b.buffer.scalar_type()) + ", not floating point");
      }
    }
  }

  at::Tensor run(GradBucket& bucket, HookComm& comm) override {
    // Divide before the cast: one rounding, and a sum of W quotients fits wherever each gradient does.
    at::Tensor wire = bucket.buffer.div(comm.world_size()).to(wire_);
    comm.allreduce_sum(wire);
    bucket.buffer.copy_(wire);
    return bucket.buffer;
  }

 private:
  at::ScalarType wire_;
  const char* name_;
};

}  // namespace

std::shared_ptr<CommHook> fp16_compress_hook() { return std::make_shared<CastHook>(at::kHalf, "fp16"); }
std::shared_ptr<CommHook> bf16_compress_hook() { return std::make_shared<CastHook>(at::kBFloat16, "bf16"); }

std::shared_ptr<CommHook> comm_hook_by_name(const std::string& name, const PowerSGDOptions& powersgd) {
  if (name == "none" || name.empty()) return nullptr;
  if (name == "fp16") return fp16_compress_hook();
  if (name == "bf16") return bf16_compress_hook();
  if (name == "powersgd") return powersgd_hook(powersgd);
  throw std::invalid_argument("unknown communication hook '" + name + "' (choose none, fp16, bf16 or powersgd)");
}

}  // namespace cohort
