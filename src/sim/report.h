// The simulator's outputs as JSON: what `cohort sim run` prints and the page draws. No torch.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace cohort::sim {

nlohmann::json params_json(const Params& p);
/// The parameters in a JSON object (missing keys keep `base`'s values); errors name each key.
Params params_from_json(const nlohmann::json& j, const Params& base, std::vector<std::string>& errors);
/// The table of parameters (name, unit, group, min, max, help, choices, default).
nlohmann::json schema_json();

struct ReportParts {
  bool series = true;
  bool events = true;
  bool timeline = false;
};
/// The summary (step breakdown, samples/s, scaling efficiency, memory, goodput and where the rest
/// went), and the parts asked for.
nlohmann::json report_json(const Simulation& s, const ReportParts& parts = {});
/// One worker's step alone / the job's mean step so far (0 before a step).
double scaling_efficiency(const Simulation& s);

}  // namespace cohort::sim
