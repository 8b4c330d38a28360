// `cohort sim serve`: the simulator's page over HTTP, on loopback unless told otherwise (then with
// a token), through the dashboard's guarded server (dashboard/server.h, as a Site).
#pragma once

namespace CLI {
class App;
}

namespace cohort::sim {
struct Params;
}

namespace cohort::tools {

struct SimOptions;

CLI::App* add_sim_serve_command(CLI::App& sim, SimOptions& options);
/// Serves until SIGINT/SIGTERM. `params`: the page starts from these (else from its first preset).
int run_sim_serve(const SimOptions& options, const sim::Params* params);

}  // namespace cohort::tools
