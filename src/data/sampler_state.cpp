// A sampler's checkpointed state as JSON. See cohort/sampler_state.h.
#include "cohort/sampler_state.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "cohort/error.h"
#include "runtime/json_fields.h"

namespace cohort {

std::string SamplerState::to_json() const {
  nlohmann::json j = {{"epoch", epoch},         {"consumed", consumed}, {"dataset_size", dataset_size},
                      {"seed", seed},           {"shuffle", shuffle}};
  return j.dump();
}

SamplerState SamplerState::from_json(const std::string& text) {
  try {
    auto j = detail::parse_capped(text);
    if (!j.is_object()) throw std::runtime_error("is not an object");
    SamplerState s;
    s.epoch = detail::integer_field(j, "epoch", 0);
    s.consumed = detail::integer_field(j, "consumed", 0);
    s.dataset_size = detail::integer_field(j, "dataset_size", 0);
    const auto seed = j.find("seed");
    if (seed == j.end() || !seed->is_number_integer()) throw std::runtime_error("has no integer \"seed\"");
    s.seed = seed->get<uint64_t>();  // any 64-bit value, as it was saved
    if (!j.contains("shuffle") || !j["shuffle"].is_boolean()) throw std::runtime_error("has no \"shuffle\" flag");
    s.shuffle = j["shuffle"].get<bool>();
    return s;
  } catch (const std::exception& e) {
    throw ConfigError(-1, std::string("sampler state is not valid JSON of a sampler state: ") + e.what());
  }
}

}  // namespace cohort
