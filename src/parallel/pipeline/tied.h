// parallel/pipeline/tied.h — a parameter used by the first and the last stage of a pipeline (the
// GPT's token embedding and its output head, issue 47). Each of the two ranks holds a copy (made
// alike); after each step's backward, TiedGradients sums the copies' gradients between them, so that
// both copies take the same update — the gradient of the one shared parameter of a one-process run.
// One Gloo group of two per pipeline (per pp slice of the mesh), made once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/device_mesh.h"
#include "parallel/pipeline/schedule.h"

namespace cohort::pipeline {

class TiedGradients {
 public:
  /// Collective over the job: every rank constructs it, after the same earlier cohort objects; the
  /// ranks of the first and the last stage of each pp slice of `mesh` connect their group of two.
  TiedGradients(const std::shared_ptr<Context>& ctx, const DeviceMesh& mesh, const Schedule& schedule);
  ~TiedGradients();
  TiedGradients(const TiedGradients&) = delete;  // the Context's rejoin listener holds `this`
  TiedGradients& operator=(const TiedGradients&) = delete;
  /// Whether this rank holds one end (the first or the last stage).
  bool holds() const { return static_cast<bool>(group_); }
  /// Sums the gradients of `params` (this rank's copies, in the same order on both ends) with the
  /// other end's; nothing where this rank holds neither end. Throws CommError when the sum fails.
  void sum(const std::vector<at::Tensor>& params);

 private:
  int rank_;
  std::shared_ptr<Context> ctx_;  // set where this rank holds an end
  std::string prefix_;
  int end_ = 0;
  int64_t listener_ = -1;
  c10::intrusive_ptr<Backend> group_;
};

}  // namespace cohort::pipeline
