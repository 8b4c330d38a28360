// JSON forms of the simulator's inputs and outputs (see report.h).
#include "report.h"

#include <cmath>

#include "engine/memory.h"

namespace cohort::sim {

using nlohmann::json;

json params_json(const Params& p) {
  json j = json::object();
  for (const auto& spec : param_specs()) {
    const std::string name = spec.name;
    if (spec.choices && std::string(spec.choices) == "bool") j[name] = get_param(p, name) != 0;
    else if (spec.choices) j[name] = param_text(p, name);
    else if (name == "seed") j[name] = p.seed;
    else j[name] = get_param(p, name);
  }
  return j;
}

Params params_from_json(const json& j, const Params& base, std::vector<std::string>& errors) {
  Params p = base;
  if (!j.is_object()) {
    errors.push_back("the parameters are not a JSON object");
    return p;
  }
  for (const auto& [key, value] : j.items()) {
    std::string text;
    if (value.is_string()) text = value.get<std::string>();
    else if (value.is_boolean()) text = value.get<bool>() ? "true" : "false";
    else if (value.is_number_unsigned()) text = std::to_string(value.get<unsigned long long>());
    else if (value.is_number_integer()) text = std::to_string(value.get<long long>());
    else if (value.is_number()) text = json(value).dump();
    else {
      errors.push_back(key + ": " + value.dump() + " is not a number, a name or a boolean");
      continue;
    }
    const std::string err = set_param(p, key, text);
    if (!err.empty()) errors.push_back(err);
  }
  return p;
}

json schema_json() {
  const Params defaults;
  json out = json::array();
  for (const auto& s : param_specs()) {
    json e = {{"name", s.name}, {"unit", s.unit}, {"group", s.group}, {"min", s.min}, {"max", s.max}, {"help", s.help}};
    if (s.choices) e["choices"] = s.choices;
    e["default"] = param_text(defaults, s.name);
    out.push_back(std::move(e));
  }
  return out;
}

double scaling_efficiency(const Simulation& s) {
  const StepSums& all = s.step_sums();
  return all.steps > 0 && all.step_s > 0 ? s.solo_step_s() / (all.step_s / all.steps) : 0;
}

json report_json(const Simulation& s, const ReportParts& parts) {
  const Params& p = s.params();
  const Totals& t = s.totals();
  const StepSums& all = s.step_sums();
  const double steps = std::max(1.0, all.steps);
  const double step_s = all.steps > 0 ? all.step_s / steps : 0;
  const Memory m = memory_per_worker(p, s.world());
  json j;
  j["t"] = s.now();
  j["world"] = s.world();
  j["nodes"] = s.active_nodes();
  j["down"] = s.down();
  j["step"] = {{"step_s", step_s},
               {"compute_s", all.compute_s / steps},
               {"exposed_comm_s", all.exposed_s / steps},
               {"waiting_s", all.waiting_s / steps},
               {"comm_s", all.comm_s / steps},
               {"buckets", s.bucket_comm_s().size()}};
  const StepSums& r = s.recent_sums();
  if (r.steps > 0) {
    j["recent_step"] = {{"step_s", r.step_s / r.steps}, {"compute_s", r.compute_s / r.steps},
                        {"exposed_comm_s", r.exposed_s / r.steps}, {"waiting_s", r.waiting_s / r.steps}};
  }
  j["samples_per_s"] = step_s > 0 ? all.samples / steps / step_s : 0;
  j["solo_step_s"] = s.solo_step_s();
  j["scaling_efficiency"] = scaling_efficiency(s);
  j["memory_per_worker"] = {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                            {"activations", m.activations}, {"total", m.total()}};
  j["checkpoint"] = {{"bytes_per_node", s.checkpoint_bytes_per_node()}, {"stall_s", s.checkpoint_stall_s()},
                     {"restore_s", s.restore_s()}};
  // What the memory budget let the series and the timeline keep (engine/budget.h), and the one line
  // saying what it down-sampled.
  const MemoryPlan& plan = s.memory_plan();
  j["memory"] = {{"budget_bytes", plan.budget_bytes}, {"asked_bytes", plan.asked_bytes}, {"planned_bytes", plan.planned_bytes},
                 {"sample_s", plan.sample_s}, {"timeline_s", plan.timeline_s}, {"timeline_steps", plan.timeline_steps}};
  if (!plan.notice.empty()) j["notice"] = plan.notice;
  j["goodput"] = t.goodput();
  j["totals"] = {{"wall_s", t.wall_s},          {"useful_s", t.useful_s},       {"lost_work_s", t.lost_work_s},
                 {"detect_s", t.detect_s},      {"restart_s", t.restart_s},     {"restore_s", t.restore_s},
                 {"repair_wait_s", t.repair_wait_s}, {"checkpoint_s", t.checkpoint_s}, {"steps", t.steps},
                 {"steps_run", t.steps_run},    {"failures", t.failures},       {"hangs", t.hangs},
                 {"restarts", t.restarts},      {"checkpoints", t.checkpoints}, {"shrinks", t.shrinks},
                 {"regrows", t.regrows},        {"useful_samples", t.useful_samples}};
  if (parts.series) {
    json series = json::array();
    for (const auto& pt : s.series()) {
      series.push_back({pt.t, pt.samples_per_s, pt.goodput, pt.goodput_window, pt.world, pt.step, pt.step_s});
    }
    j["series_fields"] = {"t", "samples_per_s", "goodput", "goodput_window", "world", "step", "step_s"};
    j["series"] = std::move(series);
  }
  if (parts.events) {
    json events = json::array();
    for (const auto& e : s.events()) events.push_back({{"t", e.t}, {"kind", e.kind}, {"message", e.message}});
    j["events"] = std::move(events);
  }
  if (parts.timeline) {
    json rows = json::array();
    for (const auto& row : s.timeline()) {
      json segs = json::array();
      for (const auto& seg : row) segs.push_back({seg.t0, seg.t1, worker_state_name(seg.state)});
      rows.push_back(std::move(segs));
    }
    j["timeline"] = std::move(rows);
    json ids = json::array();  // the world's worker of each row (a sample spread over the world)
    for (size_t i = 0; i < j["timeline"].size(); ++i) ids.push_back(s.timeline_worker(static_cast<int>(i)));
    j["timeline_workers"] = std::move(ids);
  }
  return j;
}

}  // namespace cohort::sim
