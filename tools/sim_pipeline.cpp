// `cohort sim pipeline` (issue 47): one step of a pipeline schedule at given costs, from the same
// per-rank lists the executor runs (src/parallel/pipeline/), through the same checker: the step,
// the bubble, each rank's busy and idle time, the stashes per stage; --csv prints the lists.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <string>

#include "cohort/error.h"
#include "parallel/pipeline/schedule_check.h"
#include "sim_command.h"

namespace cohort::tools {
namespace {

struct PipelineOptions {
  std::string schedule = "1f1b";
  int pp = 4, virtual_stages = 1, microbatches = 8;
  double forward = 1, input_grad = 1, weight_grad = 1;
  bool json = false, pretty = false, csv = false;
} g_pipeline_options;
CLI::App* g_pipeline_command = nullptr;

int print_pipeline_report(const pipeline::Schedule& s, const pipeline::Costs& costs) {
  const pipeline::ScheduleReport r = pipeline::check_schedule(s, costs);
  if (!r.ok()) {  // the generators' lists always pass; kept so that a broken one is never costed
    std::cerr << "cohort sim pipeline: " << r.message << std::endl;
    return 1;
  }
  nlohmann::json out = {{"schedule", pipeline::schedule_name(s.kind)}, {"pp", s.ranks},
                        {"virtual_stages", s.stages_per_rank}, {"microbatches", s.microbatches},
                        {"costs", {{"forward", costs.forward}, {"input_grad", costs.input_grad},
                                   {"weight_grad", costs.weight_grad}, {"full_backward", costs.full_backward}}},
                        {"step", r.makespan}, {"idle_fraction", r.idle_fraction()}};
  for (int rank = 0; rank < s.ranks; ++rank)
    out["ranks"].push_back({{"rank", rank}, {"busy", r.busy[rank]}, {"idle", r.idle[rank]}});
  for (int st = 0; st < s.stages(); ++st)
    out["stages"].push_back({{"stage", st}, {"rank", s.rank_of(st)}, {"peak_stashed", r.peak_stashed[st]},
                             {"peak_held", r.peak_held[st]}});
  if (g_pipeline_options.json) {
    std::cout << out.dump(g_pipeline_options.pretty ? 2 : -1) << std::endl;
    return 0;
  }
  std::cout << pipeline::schedule_name(s.kind) << ", " << s.ranks << " ranks x " << s.stages_per_rank
            << " stages, " << s.microbatches << " microbatches: step " << r.makespan << ", bubble "
            << r.idle_fraction() * 100 << " % of the ranks' time\n";
  for (int rank = 0; rank < s.ranks; ++rank)
    std::cout << "  rank " << rank << ": busy " << r.busy[rank] << ", idle " << r.idle[rank] << "\n";
  std::cout << "  microbatches stashed at most, per stage:";
  for (int st = 0; st < s.stages(); ++st) std::cout << " " << r.peak_stashed[st];
  std::cout << std::endl;
  return 0;
}

}  // namespace

CLI::App* add_sim_pipeline_command(CLI::App& sim) {
  g_pipeline_command = sim.add_subcommand("pipeline", "A pipeline schedule's step at given costs: bubble, idle time per rank, stashes per stage");
  PipelineOptions& o = g_pipeline_options;
  g_pipeline_command->add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved-1f1b or zb-h1")->capture_default_str();
  g_pipeline_command->add_option("--pp", o.pp, "Pipeline ranks")->capture_default_str();
  g_pipeline_command->add_option("--virtual-stages", o.virtual_stages, "Stages per rank (interleaved-1f1b)")->capture_default_str();
  g_pipeline_command->add_option("--microbatches", o.microbatches, "Microbatches per step")->capture_default_str();
  g_pipeline_command->add_option("--forward", o.forward, "A stage's forward of one microbatch (any unit)")->capture_default_str();
  g_pipeline_command->add_option("--input-grad", o.input_grad, "... its input gradient (B)")->capture_default_str();
  g_pipeline_command->add_option("--weight-grad", o.weight_grad, "... its weight gradient (W); a full backward is B + W")->capture_default_str();
  g_pipeline_command->add_flag("--json", o.json, "The report as JSON");
  g_pipeline_command->add_flag("--pretty", o.pretty, "Indent the JSON");
  g_pipeline_command->add_flag("--csv", o.csv, "Print the ranks' action lists instead, one line per rank");
  g_pipeline_command->footer("Example: cohort sim pipeline --schedule zb-h1 --pp 4 --microbatches 8 (docs/parallel/pipeline.md)");
  return g_pipeline_command;
}

bool sim_pipeline_parsed() { return g_pipeline_command && g_pipeline_command->parsed(); }

int run_sim_pipeline() {
  const PipelineOptions& o = g_pipeline_options;
  try {
    if (!(o.forward >= 0 && o.input_grad >= 0 && o.weight_grad >= 0))
      throw ConfigError(-1, "the costs must be 0 or more");
    // The lists hold about 4·p·v·m actions: keep them to what a laptop checks in a second.
    if (1.0 * o.pp * o.virtual_stages * o.microbatches > 1e6)
      throw ConfigError(-1, "--pp x --virtual-stages x --microbatches is " +
                                std::to_string(1LL * o.pp * o.virtual_stages * o.microbatches) + " (at most 1,000,000)");
    const pipeline::Schedule s = pipeline::make_schedule(pipeline::parse_schedule_name(o.schedule), o.pp,
                                                         o.virtual_stages, o.microbatches);
    if (o.csv) {
      std::cout << pipeline::to_csv(s);
      return 0;
    }
    return print_pipeline_report(s, pipeline::Costs{o.forward, o.input_grad, o.weight_grad, o.input_grad + o.weight_grad});
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    std::cerr << "cohort sim pipeline: " << what.substr(what.find(": ") + 2) << std::endl;
    return 2;
  }
}

}  // namespace cohort::tools
