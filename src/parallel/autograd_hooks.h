// Small pieces both gradient reducers (grad_reducer.cpp for DDP, sharded_core.cpp for sharded
// data parallel) hang on libtorch's autograd engine. Internal header.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace cohort::detail {

// Runs after AccumulateGrad of one parameter: param.grad() holds this backward's gradient.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Resets per-iteration state however an iteration's finish leaves, so that a failed collective
// surfaces as an exception from backward() instead of wedging the next iteration.
struct OnExit {
  std::function<void()> fn;
  ~OnExit() { fn(); }
};

}  // namespace cohort::detail
