// `cohort sim` (see sim_command.h). The parameters come in layers: the defaults or a --preset,
// then each --params file, then each --set; every bad one is named, all of them at once.
#include "sim_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cohort/data_file.h"
#include "sim/calibrate.h"
#include "sim/engine/engine.h"
#include "sim/optimum.h"
#include "sim/published.h"
#include "sim/presets.h"
#include "sim/report.h"
#include "runtime/json_fields.h"
#include "sim_serve.h"

namespace cohort::tools {
namespace {

using nlohmann::json;

struct Commands {
  CLI::App* run = nullptr;
  CLI::App* params = nullptr;
  CLI::App* optimum = nullptr;
  CLI::App* published = nullptr;
  CLI::App* serve = nullptr;
  CLI::App* calibrate = nullptr;
  CLI::App* predict = nullptr;
};
Commands g_commands;

std::string preset_names() {
  std::string names;
  for (const auto& p : sim::presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

void add_inputs(CLI::App* cmd, SimOptions& o) {
  cmd->add_option("--preset", o.preset, "Start from a preset: " + preset_names());
  cmd->add_option("--params", o.param_files, "A JSON file of parameters (a calibration's output too); repeatable");
  cmd->add_option("--set", o.sets, "One parameter, KEY=VALUE (cohort sim params lists them); repeatable");
}

// What a --params or --calibration file may hold: JSON of a few KiB (a report with its series and
// timeline: some MiB). A FIFO would block the command and /dev/zero fill the memory; both are
// refused by read_data_file, as is a file over this.
const DataFileLimit kJsonFileLimit{64ull << 20, "a parameter or calibration file may have"};

/// The parameters the options give, or the errors (each one line).
bool resolve(const SimOptions& o, sim::Params& out, std::vector<std::string>& errors) {
  sim::Params p;
  if (!o.preset.empty()) {
    const sim::Preset* preset = sim::find_preset(o.preset);
    if (!preset) {
      errors.push_back("no preset '" + o.preset + "' (there are: " + preset_names() + ")");
      return false;
    }
    p = preset->params;
  }
  for (const auto& file : o.param_files) {
    std::string text, why;
    if (!read_data_file(file, kJsonFileLimit, text, why)) {
      errors.push_back("--params " + file + ": " + why);
      continue;
    }
    std::string problem;
    json j = cohort::detail::parse_capped_or_discarded(text, &problem);
    if (j.is_discarded()) {
      errors.push_back(file + " is " + problem);
      continue;
    }
    if (j.is_object() && j.contains("params") && j["params"].is_object()) j = j["params"];  // a report's or calibration's
    std::vector<std::string> errs;
    p = sim::params_from_json(j, p, errs);
    for (const auto& e : errs) errors.push_back(file + ": " + e);
  }
  for (const auto& kv : o.sets) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      errors.push_back("--set " + kv + ": give KEY=VALUE");
      continue;
    }
    const std::string err = sim::set_param(p, kv.substr(0, eq), kv.substr(eq + 1));
    if (!err.empty()) errors.push_back("--set " + err);
  }
  for (const auto& e : sim::validate(p)) errors.push_back(e);
  out = p;
  return errors.empty();
}

int fail(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::cerr << "cohort sim: error: " << e << std::endl;
  return 2;
}

int run_params(const SimOptions& o) {
  if (o.json) {
    std::cout << sim::schema_json().dump(o.pretty ? 2 : -1) << std::endl;
    return 0;
  }
  sim::Params p;
  std::vector<std::string> errors;
  if (!resolve(o, p, errors)) return fail(errors);
  std::string group;
  for (const auto& s : sim::param_specs()) {
    if (group != s.group) {
      group = s.group;
      std::cout << "[" << group << "]\n";
    }
    std::cout << "  " << std::left << std::setw(28) << s.name << std::setw(14) << sim::param_text(p, s.name) << s.help;
    if (s.unit && *s.unit) std::cout << " (" << s.unit << ")";
    if (s.choices && std::string(s.choices) != "bool") std::cout << " {" << s.choices << "}";
    std::cout << "\n";
  }
  for (const auto& pr : sim::presets()) std::cout << "preset " << pr.name << ": " << pr.title << "\n";
  return 0;
}

int run_run(const SimOptions& o) {
  sim::Params p;
  std::vector<std::string> errors;
  if (!resolve(o, p, errors)) return fail(errors);
  // Changes while it runs, as the page makes them: from the first step end at or after SECONDS.
  std::vector<std::pair<double, std::string>> changes;
  for (const auto& a : o.at) {
    const auto colon = a.find(':');
    char* end = nullptr;
    const double t = colon == std::string::npos ? -1 : std::strtod(a.c_str(), &end);
    if (colon == std::string::npos || end != a.c_str() + colon || !(t >= 0) || a.find('=', colon) == std::string::npos) {
      errors.push_back("--at " + a + ": give SECONDS:KEY=VALUE (seconds of simulated time, >= 0)");
      continue;
    }
    changes.emplace_back(t, a.substr(colon + 1));
  }
  if (!errors.empty()) return fail(errors);
  std::stable_sort(changes.begin(), changes.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  sim::Simulation s(p);
  // Past memory_budget_mb the series and the timeline are down-sampled: one line here, and the
  // report's "notice" (sim/engine/budget.h).
  std::string notice = s.memory_plan().notice;
  if (!notice.empty()) std::cerr << "cohort sim: " << notice << std::endl;
  for (const auto& [t, kv] : changes) {
    s.run_for(t - s.now());
    sim::Params next = s.params();
    const auto eq = kv.find('=');
    const std::string err = sim::set_param(next, kv.substr(0, eq), kv.substr(eq + 1));
    if (!err.empty()) return fail({"--at " + err});
    const auto bad = sim::validate(next);
    if (!bad.empty()) return fail(bad);
    s.set_params(next);
    if (s.memory_plan().notice != notice && !(notice = s.memory_plan().notice).empty()) {
      std::cerr << "cohort sim: at " << s.now() << " s: " << notice << std::endl;
    }
  }
  s.run();
  json j = sim::report_json(s, {!o.no_series, true, o.timeline});
  j["params"] = sim::params_json(s.params());
  std::cout << j.dump(o.pretty ? 2 : -1) << std::endl;
  return 0;
}

int run_optimum(const SimOptions& o) {
  sim::Params p;
  std::vector<std::string> errors;
  if (!resolve(o, p, errors)) return fail(errors);
  if (p.node_mtbf_h <= 0) return fail({"the optimum checkpoint interval needs failures: set node_mtbf_h (--set node_mtbf_h=24)"});
  const sim::Optimum r = sim::optimum_interval(p);
  json curve = json::array();
  for (const auto& c : r.curve) curve.push_back({{"every", c.every}, {"interval_s", c.interval_s}, {"goodput", c.goodput}});
  json j = {{"young_daly_s", r.young_daly_s},       {"best_interval_s", r.best_interval_s},
            {"best_every", r.best.every},           {"best_goodput", r.best.goodput},
            {"delta_s", r.delta_s},                 {"job_mtbf_s", r.job_mtbf_s},
            {"step_s", r.step_s},                   {"simulated_hours", r.simulated_hours},
            {"ratio", r.best_interval_s / r.young_daly_s}, {"curve", curve}};
  std::cout << j.dump(o.pretty ? 2 : -1) << std::endl;
  return 0;
}

// Published scaling figures next to the simulator's from the same setups (src/sim/published.cpp
// cites each figure and where every input comes from).
int run_published(const SimOptions& o) {
  json out = json::array();
  for (const auto& f : sim::published_figures()) {
    const double e = sim::simulated_efficiency(f.params);
    const int gpus = f.nodes * f.gpus_per_node;
    out.push_back({{"source", f.source}, {"model", f.model}, {"nodes", f.nodes}, {"gpus", gpus},
                   {"published_efficiency", f.efficiency}, {"simulated_efficiency", e}, {"difference", e - f.efficiency}});
    if (!o.json) {
      std::printf("%-13s %4d GPUs (%3d x %d): published %5.1f %%, simulated %5.1f %% (%+.1f points)  [%s]\n", f.model, gpus,
                  f.nodes, f.gpus_per_node, f.efficiency * 100, e * 100, (e - f.efficiency) * 100, f.source);
    }
  }
  if (o.json) std::cout << out.dump(o.pretty ? 2 : -1) << std::endl;
  return 0;
}

// `allow_load`: keep steps that other work on the machine slowed (sim/runlog/run_load.h); the
// notes about each run go to stderr either way.
std::vector<sim::RunSummary> read_runs(const std::vector<std::string>& dirs, std::vector<std::string>& errors,
                                       bool allow_load, bool shared_machine) {
  std::vector<sim::RunSummary> runs;
  for (const auto& d : dirs) {
    try {
      runs.push_back(sim::summarize_run(d, allow_load, shared_machine));
      for (const auto& note : runs.back().notes) std::cerr << "cohort sim: " << note << std::endl;
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  return runs;
}

int run_calibrate(const SimOptions& o) {
  std::vector<std::string> errors;
  const auto runs = read_runs(o.run_dirs, errors, o.allow_load, o.shared_machine);
  if (!errors.empty()) return fail(errors);
  const int cores = o.cores > 0 ? o.cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const sim::Calibration c = sim::calibrate(runs, cores, o.shared_machine);
  if (c.fitted_threads.size() == 1) {
    const int t = c.fitted_threads[0];
    std::cerr << "cohort sim: every run gave its workers " << t << " thread" << (t == 1 ? "" : "s")
              << ": the fit cannot split their compute into serial and parallel parts, and assumes all of it scales"
                 " (predictions at other thread counts are marked); a run of another size fits the split"
              << std::endl;
  }
  const std::string text = cohort::detail::dump_text(sim::calibration_json(c), 2);  // run directories: any bytes
  if (o.output.empty()) {
    std::cout << text << std::endl;
  } else {
    std::ofstream out(o.output);
    out << text << "\n";
    if (!out.flush()) return fail({"cannot write " + o.output});
    std::cerr << "cohort sim: calibration of " << runs.size() << " runs written to " << o.output << std::endl;
  }
  return 0;
}

int run_predict(const SimOptions& o) {
  std::string text, why;
  if (!read_data_file(o.calibration, kJsonFileLimit, text, why)) return fail({"--calibration " + o.calibration + ": " + why});
  std::string problem;
  const json j = cohort::detail::parse_capped_or_discarded(text, &problem);
  if (j.is_discarded()) return fail({o.calibration + " is " + problem});
  sim::Calibration c;
  try {
    c = sim::calibration_from_json(j, o.calibration);
  } catch (const std::exception& e) {
    return fail({e.what()});
  }
  std::vector<std::string> errors;
  // A measured run is what it is: its load is noted, not refused.
  const auto runs = read_runs(o.run_dirs, errors, /*allow_load=*/true, c.shared_machine);
  if (!errors.empty()) return fail(errors);
  json out = json::array();
  bool all_within = true;
  for (const auto& r : runs) {
    const sim::Prediction pr = sim::predict(c, r);
    const bool ok = std::fabs(pr.step_error) <= o.tolerance_step &&
                    (r.recovery_s <= 0 || std::fabs(pr.recovery_error) <= o.tolerance_recovery);
    all_within = all_within && ok;
    out.push_back({{"dir", r.dir}, {"world", r.world}, {"nodes", r.nodes}, {"measured_step_s", r.step_s},
                   {"predicted_step_s", pr.predicted_step_s}, {"step_error", pr.step_error},
                   {"measured_recovery_s", r.recovery_s}, {"predicted_recovery_s", pr.predicted_recovery_s},
                   {"recovery_error", pr.recovery_error}, {"threads", pr.threads},
                   {"threads_fitted", pr.threads_fitted}, {"within", ok}});
    if (!pr.threads_fitted) {
      std::cerr << "cohort sim: " << r.dir << ": " << pr.threads << " threads per worker, a count the calibration never saw:"
                << " its compute assumes perfect scaling" << std::endl;
    }
    if (!o.json) {
      std::cout << r.dir << ": " << r.world << " workers on " << r.nodes << " node(s): step " << r.step_s * 1000
                << " ms measured, " << pr.predicted_step_s * 1000 << " ms predicted (" << std::showpos
                << pr.step_error * 100 << std::noshowpos << " %)" << (ok ? "" : "  OUTSIDE the tolerance") << "\n";
    }
  }
  if (o.json) std::cout << cohort::detail::dump_text(out, o.pretty ? 2 : -1) << std::endl;  // run directories: any bytes
  return all_within ? 0 : 1;
}

}  // namespace

CLI::App* add_sim_command(CLI::App& app, SimOptions& o) {
  CLI::App* sim = app.add_subcommand("sim", "Simulate a job at any scale: step time, memory, failures, goodput");
  sim->require_subcommand(1);
  g_commands.run = sim->add_subcommand("run", "Simulate a job and print the report (JSON)");
  add_inputs(g_commands.run, o);
  g_commands.run->add_flag("--pretty", o.pretty, "Indent the JSON");
  g_commands.run->add_flag("--timeline", o.timeline, "Include the workers' timeline (the last timeline_s seconds)");
  g_commands.run->add_flag("--no-series", o.no_series, "Leave the series out");
  g_commands.run->add_option("--at", o.at, "A change while it runs, SECONDS:KEY=VALUE (as the page makes one); repeatable");
  g_commands.run->footer("Example: cohort sim run --preset 64-gpus --set node_mtbf_h=96 --pretty");

  g_commands.params = sim->add_subcommand("params", "List the parameters with their values, units and meanings");
  add_inputs(g_commands.params, o);
  g_commands.params->add_flag("--json", o.json, "The table as JSON (names, units, ranges, defaults)");

  g_commands.optimum = sim->add_subcommand("optimum", "The checkpoint interval with the best goodput, next to Young/Daly's");
  add_inputs(g_commands.optimum, o);
  g_commands.optimum->add_flag("--pretty", o.pretty, "Indent the JSON");

  g_commands.published = sim->add_subcommand("published", "Published scaling figures (Horovod at 128 and 512 GPUs, PyTorch DDP at 16) next to the simulator's");
  g_commands.published->add_flag("--json", o.json, "The table as JSON");
  g_commands.published->add_flag("--pretty", o.pretty, "Indent the JSON");

  g_commands.calibrate = sim->add_subcommand("calibrate", "Fit the parameters to cohort runs' event logs");
  g_commands.calibrate->add_option("RUN_DIR", o.run_dirs, "Run directories (each holds events.jsonl)")->required();
  g_commands.calibrate->add_option("-o,--output", o.output, "Write the calibration here (default: stdout)");
  g_commands.calibrate->add_option("--cores", o.cores, "The machine's cores (default: this machine's)")->check(CLI::Range(1, 1 << 20));
  g_commands.calibrate->add_flag("--allow-load", o.allow_load,
                                 "Fit runs whose machine other work loaded (refused by default: steps of loaded windows are left out, "
                                 "a run with too few clean steps is an error)");
  g_commands.calibrate->add_flag("--shared-machine", o.shared_machine,
                                 "The runs' nodes were network namespaces of this one machine, sharing its cores");
  g_commands.calibrate->footer("Then: cohort sim run --params CALIBRATION.json, cohort sim predict --calibration CALIBRATION.json RUN_DIR...");

  g_commands.predict = sim->add_subcommand("predict", "Predict runs' step (and recovery) times from a calibration; compare with their logs");
  g_commands.predict->add_option("--calibration", o.calibration, "The file cohort sim calibrate wrote")->required();
  g_commands.predict->add_option("RUN_DIR", o.run_dirs, "Run directories to predict")->required();
  g_commands.predict->add_option("--tolerance", o.tolerance_step, "Allowed relative error of the step time")->capture_default_str();
  g_commands.predict->add_option("--recovery-tolerance", o.tolerance_recovery, "... of the recovery time")->capture_default_str();
  g_commands.predict->add_flag("--json", o.json, "The comparison as JSON");
  g_commands.predict->add_flag("--pretty", o.pretty, "Indent the JSON");
  g_commands.predict->footer("Exit status 1 when a prediction is outside the tolerance.");

  g_commands.serve = add_sim_serve_command(*sim, o);
  add_sim_pipeline_command(*sim);
  return sim;
}

int run_sim_command(CLI::App& /*sim*/, const SimOptions& o) {
  try {
    if (g_commands.run->parsed()) return run_run(o);
    if (g_commands.params->parsed()) return run_params(o);
    if (g_commands.optimum->parsed()) return run_optimum(o);
    if (g_commands.published->parsed()) return run_published(o);
    if (g_commands.calibrate->parsed()) return run_calibrate(o);
    if (g_commands.predict->parsed()) return run_predict(o);
    if (sim_pipeline_parsed()) return run_sim_pipeline();
    if (g_commands.serve->parsed()) {
      sim::Params p;
      std::vector<std::string> errors;
      if (!resolve(o, p, errors)) return fail(errors);
      return run_sim_serve(o, (o.preset.empty() && o.param_files.empty() && o.sets.empty()) ? nullptr : &p);
    }
  } catch (const std::exception& e) {
    return fail({e.what()});
  }
  return 2;
}

}  // namespace cohort::tools
