// TiedGradients (tied.h): the group of a pipeline's two ends is a runtime subgroup named by the
// object's number in the job and the pipeline's first rank, so that every pp slice has its own.
#include "parallel/pipeline/tied.h"

#include <torch/torch.h>

#include "cohort/error.h"
#include "runtime/context_internals.h"

namespace cohort::pipeline {

TiedGradients::TiedGradients(const std::shared_ptr<Context>& ctx, const DeviceMesh& mesh, const Schedule& schedule)
    : rank_(ctx->rank()) {
  const int64_t sequence = detail::ContextInternals::next_sequence(*ctx);
  const std::vector<int> pipeline = mesh.slice_ranks("pp");
  if (static_cast<int>(pipeline.size()) != schedule.ranks)
    throw ConfigError(rank_, "tied gradients: the mesh's pp size is " + std::to_string(pipeline.size()) +
                                 ", the schedule's " + std::to_string(schedule.ranks));
  const int first = pipeline[schedule.rank_of(0)], last = pipeline[schedule.rank_of(schedule.stages() - 1)];
  if (first == last || (rank_ != first && rank_ != last)) return;
  ctx_ = ctx;
  prefix_ = "cohort/pipeline/tied/" + std::to_string(sequence) + "/" + std::to_string(first) + "/";
  end_ = rank_ == first ? 0 : 1;
  group_ = detail::make_cpu_subgroup(*ctx, prefix_, end_, 2);
  // Re-formed with the Context's groups around a replaced peer (keep_running.h), as DDP's are.
  listener_ = detail::ContextInternals::add_rejoin_listener(
      *ctx, "pipeline TiedGradients", [this] { group_.reset(); },
      [this] { group_ = detail::make_cpu_subgroup(*ctx_, prefix_, end_, 2); });
}

TiedGradients::~TiedGradients() {
  if (listener_ >= 0) detail::ContextInternals::remove_rejoin_listener(*ctx_, listener_);
}

void TiedGradients::sum(const std::vector<at::Tensor>& params) {
  if (!group_) return;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined())
      throw ConfigError(rank_, "tied gradients: a tied parameter has no gradient (was it used in the step?)");
    std::vector<at::Tensor> g{p.grad()};
    try {
      group_->allreduce(g)->wait();
    } catch (const std::exception& e) {
      const std::string cause = e.what();
      throw CommError(rank_, "tied gradients: the sum with the pipeline's other end failed (" +
                                 cause.substr(0, cause.find('\n')) + ")");
    }
  }
}

}  // namespace cohort::pipeline
