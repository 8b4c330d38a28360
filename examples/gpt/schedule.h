// The learning-rate schedule of GPT-2 / nanoGPT: linear warm-up over `warmup` steps to `max_lr`,
// then a half cosine down to `min_lr` at step `total`, flat after. It is a cohort::Stateful, so
// checkpoints carry its position and settings: a resumed run continues the same curve, and a
// restart with other settings is refused (the restore names it) instead of silently bending it.
#pragma once

#include <cohort/checkpointer.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

class CosineSchedule : public cohort::Stateful {
 public:
  CosineSchedule(double max_lr, double min_lr, int64_t warmup, int64_t total)
      : max_lr_(max_lr), min_lr_(min_lr), warmup_(warmup), total_(total) {}

  /// The rate for the step about to be taken (step() steps done so far).
  double lr() const {
    if (step_ < warmup_) return max_lr_ * static_cast<double>(step_ + 1) / static_cast<double>(warmup_);
    if (step_ >= total_) return min_lr_;
    const double progress = static_cast<double>(step_ - warmup_) / static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    return min_lr_ + 0.5 * (1.0 + std::cos(M_PI * progress)) * (max_lr_ - min_lr_);
  }
  void advance() { ++step_; }
  int64_t step() const { return step_; }

  std::string state_dict() const override {
    return nlohmann::json{{"step", step_}, {"max_lr", max_lr_}, {"min_lr", min_lr_}, {"warmup", warmup_}, {"total", total_}}
        .dump();
  }
  void load_state_dict(const std::string& state) override {
    const auto j = nlohmann::json::parse(state);
    const nlohmann::json mine{{"max_lr", max_lr_}, {"min_lr", min_lr_}, {"warmup", warmup_}, {"total", total_}};
    for (const auto& [key, value] : mine.items()) {
      const auto& saved = j.at(key);
      // A number is shown; anything else by its kind: dumping 100,000 nested arrays from a damaged
      // checkpoint would overflow the stack.
      if (saved != value)
        throw std::runtime_error("saved with " + key + " " + (saved.is_number() ? saved.dump() : std::string(saved.type_name())) +
                                 ", this run has " + value.dump() + " (use a new --ckpt-dir for another schedule)");
    }
    step_ = j.at("step").get<int64_t>();
  }

 private:
  double max_lr_, min_lr_;
  int64_t warmup_, total_;
  int64_t step_ = 0;
};
