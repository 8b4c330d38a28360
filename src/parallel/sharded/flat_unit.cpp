#include "flat_unit.h"

#include <c10/core/StorageImpl.h>

#include "cohort/error.h"
#include "runtime/check.h"

namespace cohort::detail {
namespace {

// A tensor sharing `storage` at `offset` with sizes `sizes`, not an autograd view: its own version
// counter, and a leaf that may require grad.
torch::Tensor alias(const c10::Storage& storage, const torch::TensorOptions& options, int64_t offset, int64_t numel) {
  return torch::empty({0}, options).set_(storage, offset, {numel}, {1});
}

}  // namespace

FlatUnit::FlatUnit(std::vector<FlatParam> params, int rank, int world, bool own_shard)
    : params_(std::move(params)), rank_(rank), world_(world), own_shard_(own_shard) {
  COHORT_CHECK(!params_.empty(), "a unit without parameters");
  for (auto& p : params_) {
    p.offset = numel_;
    p.numel = p.param.numel();
    numel_ += p.numel;
  }
  shard_size_ = (numel_ + world_ - 1) / world_;
  const auto options = params_.front().param.options().requires_grad(false);
  full_ = torch::zeros({padded()}, options);
  if (own_shard_) {
    shard_ = torch::zeros({shard_size_}, options);
  } else {
    shard_ = alias(full_.storage(), options, shard_begin(), shard_size_);
  }
  shard_.set_requires_grad(true);
}

void FlatUnit::allocate() {
  if (allocated_) return;
  auto* impl = full_.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(padded()) * full_.element_size();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
  allocated_ = true;
}

void FlatUnit::release() {
  if (!allocated_) return;
  COHORT_CHECK(own_shard_, "releasing a unit whose shard lives in it");
  auto* impl = full_.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
  impl->set_nbytes(0);
  allocated_ = false;
  gathered_version = -1;
}

torch::Tensor FlatUnit::full_alias() const {
  COHORT_CHECK(allocated_, "a released unit has no data");
  return alias(full_.storage(), full_.options(), 0, padded());
}

void FlatUnit::copy_params_into_full() {
  torch::NoGradGuard no_grad;
  auto f = full_alias();
  for (const auto& p : params_) f.narrow(0, p.offset, p.numel).copy_(p.param.detach().reshape(-1));
}

void FlatUnit::bind_params() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) p.param.set_data(full_.narrow(0, p.offset, p.numel).view(p.param.sizes()));
}

void FlatUnit::shard_from_full() {
  torch::NoGradGuard no_grad;
  if (own_shard_) shard_.detach().copy_(own_region());
}

}  // namespace cohort::detail
