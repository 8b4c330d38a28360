// --phase-times: where a training step's time goes, phase by phase, to compare with
// bench/peer_gpt.py's flag of the same name on the same GPU. Each boundary synchronises the device
// (on a GPU the host otherwise runs ahead of the kernels it launched), so a timed step is slower
// than an untimed one: compare the phases of the two sides, not these steps with untimed ones.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

class PhaseTimes {
 public:
  PhaseTimes(bool on, torch::Device device) : on_(on), device_(device) {}

  /// Starts a step's first phase (call where the step's timer starts).
  void start() {
    if (!on_) return;
    sync();
    last_ = clock::now();
  }
  /// Ends the phase `name` (phases are reported in the order first seen).
  void end(const std::string& name) {
    if (!on_) return;
    sync();
    const auto now = clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    if (!counting_) return;
    for (auto& [n, total] : totals_) {
      if (n == name) {
        total += ms;
        return;
      }
    }
    totals_.emplace_back(name, ms);
  }
  /// Whether the phases now ending count (false during the warm-up steps).
  void count(bool counting) { counting_ = counting; }
  /// Milliseconds per step of each phase over `steps` counted steps; null when off.
  nlohmann::json per_step(int64_t steps) const {
    if (!on_ || steps <= 0) return nullptr;
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [name, total] : totals_) out[name] = total / static_cast<double>(steps);
    return out;
  }

 private:
  using clock = std::chrono::steady_clock;
  void sync() const {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  }
  bool on_;
  torch::Device device_;
  bool counting_ = false;
  clock::time_point last_;
  std::vector<std::pair<std::string, double>> totals_;
};
