// The simulator for the page (web/sim/): the same C++ core compiled to WebAssembly by Emscripten,
// behind a handful of C functions that take and return JSON text. One simulation at a time; the
// returned text lives until the next call.
#include <emscripten/emscripten.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "optimum.h"
#include "presets.h"
#include "report.h"
#include "runtime/json_fields.h"  // header-only: em++ has src/ on its path too

using nlohmann::json;
using namespace cohort::sim;

namespace {

std::unique_ptr<Simulation> g_sim;
std::string g_out;
size_t g_series_sent = 0;
size_t g_events_sent = 0;

const char* out(const json& j) {
  g_out = cohort::detail::dump_text(j);
  return g_out.c_str();
}

const char* errors_out(const std::vector<std::string>& errors) { return out(json{{"errors", errors}}); }

bool parse(const char* text, Params& p, std::vector<std::string>& errors) {
  const json j = cohort::detail::parse_capped_or_discarded(text ? text : "");
  if (j.is_discarded()) {
    errors.push_back("the parameters are not JSON");
    return false;
  }
  p = params_from_json(j, Params{}, errors);
  for (const auto& e : validate(p)) errors.push_back(e);
  // The tab's WebAssembly memory ends at 2 GiB; the budget's outputs must fit in it beside the rest.
  constexpr double kPageBudgetMb = 1024;
  if (p.memory_budget_mb > kPageBudgetMb) {
    errors.push_back("memory_budget_mb is " + param_text(p, "memory_budget_mb") + ": the page holds at most 1024 MiB (its WebAssembly memory ends at 2 GiB)");
  }
  return errors.empty();
}

}  // namespace

extern "C" {

/// The parameter table and the presets: {"params": [...], "presets": [{name, title, params}]}.
EMSCRIPTEN_KEEPALIVE const char* sim_schema() {
  json presets_json = json::array();
  for (const auto& p : presets()) presets_json.push_back({{"name", p.name}, {"title", p.title}, {"params", params_json(p.params)}});
  return out(json{{"params", schema_json()}, {"presets", presets_json}, {"defaults", params_json(Params{})}});
}

/// A new simulation from these parameters (a full set): {} or {"errors": [...]}.
EMSCRIPTEN_KEEPALIVE const char* sim_start(const char* params) {
  Params p;
  std::vector<std::string> errors;
  if (!parse(params, p, errors)) return errors_out(errors);
  try {
    g_sim = std::make_unique<Simulation>(p);
  } catch (const std::exception& e) {
    return errors_out({e.what()});
  }
  g_series_sent = g_events_sent = 0;
  return out(json::object());
}

/// New parameters for the running simulation, from now on: {} or {"errors": [...]} (then the
/// simulation goes on with the old ones).
EMSCRIPTEN_KEEPALIVE const char* sim_set(const char* params) {
  if (!g_sim) return errors_out({"no simulation: start one first"});
  Params p;
  std::vector<std::string> errors;
  if (!parse(params, p, errors)) return errors_out(errors);
  try {
    g_sim->set_params(p);
  } catch (const std::exception& e) {
    return errors_out({e.what()});
  }
  return out(json::object());
}

/// Advances by `seconds` of simulated time and returns the report with the series points and
/// events that are new since the last call (and the timeline when asked).
EMSCRIPTEN_KEEPALIVE const char* sim_advance(double seconds, int with_timeline) {
  if (!g_sim) return errors_out({"no simulation: start one first"});
  g_sim->run_for(seconds);
  json j = report_json(*g_sim, {false, false, with_timeline != 0});
  json series = json::array();
  const auto& all = g_sim->series();
  for (size_t i = g_series_sent; i < all.size(); ++i) {
    const auto& pt = all[i];
    series.push_back({pt.t, pt.samples_per_s, pt.goodput, pt.goodput_window, pt.world, pt.step, pt.step_s});
  }
  g_series_sent = all.size();
  j["series_new"] = std::move(series);
  json events = json::array();
  const auto& ev = g_sim->events();
  const size_t fresh = std::min(ev.size(), static_cast<size_t>(g_sim->events_emitted()) - g_events_sent);
  for (size_t i = ev.size() - fresh; i < ev.size(); ++i) {
    events.push_back({{"t", ev[i].t}, {"kind", ev[i].kind}, {"message", ev[i].message}});
  }
  g_events_sent = static_cast<size_t>(g_sim->events_emitted());
  j["events_new"] = std::move(events);
  j["finished"] = g_sim->finished();
  return out(j);
}

/// The checkpoint-interval sweep for these parameters: the curve and both optima.
EMSCRIPTEN_KEEPALIVE const char* sim_optimum(const char* params) {
  Params p;
  std::vector<std::string> errors;
  if (!parse(params, p, errors)) return errors_out(errors);
  if (p.node_mtbf_h <= 0) return errors_out({"the optimum checkpoint interval needs failures: node_mtbf_h is 0"});
  try {
    const Optimum r = optimum_interval(p, 15, 200, 2);
    json curve = json::array();
    for (const auto& c : r.curve) curve.push_back({{"every", c.every}, {"interval_s", c.interval_s}, {"goodput", c.goodput}});
    return out(json{{"young_daly_s", r.young_daly_s}, {"best_interval_s", r.best_interval_s}, {"best_goodput", r.best.goodput},
                    {"delta_s", r.delta_s}, {"job_mtbf_s", r.job_mtbf_s}, {"curve", curve}});
  } catch (const std::exception& e) {
    return errors_out({e.what()});
  }
}

}  // extern "C"
