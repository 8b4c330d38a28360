// `cohort`: the command line. Subcommands: run (src/launcher/), ckpt (ckpt_command.cpp),
// dashboard (dashboard_command.cpp), sim (sim_command.cpp), data (data_command.cpp), trace (trace/). Errors are one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "ckpt_command.h"
#include "data_command.h"
#include "dashboard_command.h"
#include "sim_command.h"
#include "trace/trace_command.h"
#include "cohort/version.h"
#include "launcher/agent.h"
#include "launcher/config/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"cohort — distributed training for libtorch (C++) programs"};
  app.set_version_flag("--version", std::string("cohort ") + cohort::version());
  app.require_subcommand(0, 1);
  app.footer(
      "Start a job: cohort run --nproc-per-node 4 -- ./train --epochs 10\n"
      "A training program joins its job with cohort::init(); it also runs under torchrun, mpirun\n"
      "or srun. Documentation: docs/launcher.md and docs/ in the source tree.");
  cohort::launcher::RunOptions run_options;
  CLI::App* run = cohort::launcher::add_run_command(app, run_options);
  cohort::tools::CkptOptions ckpt_options;
  CLI::App* ckpt = cohort::tools::add_ckpt_command(app, ckpt_options);
  cohort::tools::DashboardOptions dashboard_options;
  CLI::App* dashboard = cohort::tools::add_dashboard_command(app, dashboard_options);
  cohort::tools::SimOptions sim_options;
  CLI::App* sim = cohort::tools::add_sim_command(app, sim_options);
  cohort::tools::DataOptions data_options;
  CLI::App* data = cohort::tools::add_data_command(app, data_options);
  cohort::tools::TraceOptions trace_options;
  CLI::App* trace = cohort::tools::add_trace_command(app, trace_options);

  // CLI11 sees cohort's own arguments only; the program and its arguments are kept apart.
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> ours = cohort::launcher::split_at_program(args, *run, run_options.command);
  std::vector<const char*> cargv{argv[0]};
  for (const auto& a : ours) cargv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargv.size()), const_cast<char**>(cargv.data()));
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --version
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what) c = c == '\n' ? ' ' : c;
    const std::string sub = run->parsed()         ? " run"
                            : ckpt->parsed()      ? " ckpt"
                            : dashboard->parsed() ? " dashboard"
                            : sim->parsed()       ? " sim"
                            : data->parsed()      ? " data"
                            : trace->parsed()     ? " trace"
                                                  : "";
    std::cerr << "cohort" << sub << ": error: " << what << " (see cohort" << sub << " --help)" << std::endl;
    return 2;
  }
  if (run->parsed()) return cohort::launcher::run_job(run_options);
  if (ckpt->parsed()) return cohort::tools::run_ckpt_command(*ckpt, ckpt_options);
  if (dashboard->parsed()) return cohort::tools::run_dashboard_command(dashboard_options);
  if (sim->parsed()) return cohort::tools::run_sim_command(*sim, sim_options);
  if (trace->parsed()) return cohort::tools::run_trace_command(trace_options);
  if (data->parsed()) return cohort::tools::run_data_command(*data, data_options);
  if (!run_options.command.empty()) {
    std::cerr << "cohort: error: unexpected arguments; to start a program use cohort run [--] PROGRAM" << std::endl;
    return 2;
  }
  std::cout << app.help();
  return 0;
}
