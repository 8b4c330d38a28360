// Fuzzes the parser of a sampler's state as a checkpoint stores it (cohort/sampler_state.h): any
// text is a state or a ConfigError, never another exception or a crash; a state it accepts comes
// back unchanged through to_json() and from_json().
#include <cstddef>
#include <cstdint>
#include <string>

#include "cohort/error.h"
#include "cohort/sampler_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cohort::SamplerState s;
  try {
    s = cohort::SamplerState::from_json(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const cohort::ConfigError&) {
    return 0;
  }
  const auto again = cohort::SamplerState::from_json(s.to_json());
  if (again.epoch != s.epoch || again.consumed != s.consumed || again.dataset_size != s.dataset_size ||
      again.seed != s.seed || again.shuffle != s.shuffle)
    __builtin_trap();
  return 0;
}
