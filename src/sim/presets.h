// Built-in starting points (the page's presets and `cohort sim run --preset`). The published
// figures they follow are cited in presets.cpp. No torch.
#pragma once

#include <string>
#include <vector>

#include "params.h"

namespace cohort::sim {

struct Preset {
  const char* name;
  const char* title;
  Params params;
};

const std::vector<Preset>& presets();
/// The preset of that name, or nullptr.
const Preset* find_preset(const std::string& name);

}  // namespace cohort::sim
