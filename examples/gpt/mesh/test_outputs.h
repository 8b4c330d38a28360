// What the GPT example prints and writes for equivalence tests (issue 47), the same in every mode:
// each step's global gradient norm before clipping (--print-grad-norms, rank 0), and the whole
// model in the one-process model's order written to a file (--save-params, rank 0) or compared with
// one (--compare-params: the result's param_max_rel_diff, the largest over the parameters of
// ||a - b||₂ / ||b||₂).
#pragma once

#include <cohort/error.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "options.h"

inline void print_grad_norm(const Options& o, int rank, int64_t step, const torch::Tensor& norm) {
  if (!o.print_grad_norms || rank != 0 || !norm.defined()) return;
  std::cout << "step " << step << " grad_norm " << std::setprecision(17) << norm.item<double>() << std::endl;
}

inline void save_or_compare_params(const std::vector<torch::Tensor>& full, const Options& o, int rank, nlohmann::json& result) {
  if (!o.save_params.empty() && rank == 0) {
    std::vector<torch::Tensor> copy;
    for (const auto& t : full) copy.push_back(t.detach().to(torch::kCPU).clone());
    torch::save(copy, o.save_params);
  }
  if (o.compare_params.empty()) return;
  std::vector<torch::Tensor> ref;
  try {
    torch::load(ref, o.compare_params);
  } catch (const std::exception& e) {
    throw cohort::ConfigError(rank, "--compare-params " + o.compare_params + ": cannot read it (" +
                                        std::string(e.what()).substr(0, std::string(e.what()).find('\n')) + ")");
  }
  if (ref.size() != full.size())
    throw cohort::ConfigError(rank, "--compare-params " + o.compare_params + " holds " + std::to_string(ref.size()) +
                                        " tensors, the model " + std::to_string(full.size()));
  double worst = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const auto a = full[i].detach().to(torch::kCPU, torch::kDouble), b = ref[i].to(torch::kDouble);
    if (a.sizes() != b.sizes())
      throw cohort::ConfigError(rank, "--compare-params: parameter " + std::to_string(i) + " has another shape");
    const double diff = (a - b).norm().item<double>(), size = b.norm().item<double>();
    worst = std::max(worst, size > 0 ? diff / size : diff);
  }
  result["param_max_rel_diff"] = worst;
}
