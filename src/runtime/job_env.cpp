// Resolution of rank, world size and rendezvous address from the environment (see job_env.h).
// No torch here: this file compiles in a second and the launcher shares it.
#include "cohort/job_env.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "cohort/error.h"

namespace cohort {
namespace {

struct Family {
  const char* name;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

// Order is precedence (issue #2): cohort, torchrun, OpenMPI, Slurm.
const std::vector<Family> kFamilies = {
    {"cohort", "COHORT_RANK", "COHORT_WORLD_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

// Parses a non-negative integer; the error names the variable and its value. The rank is not
// known yet when the environment is wrong, so errors say "rank ?" through rank -1.
int parse_int(const std::string& var, const std::string& value, int min_value) {
  size_t used = 0;
  long parsed = 0;
  try {
    parsed = std::stol(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || parsed < min_value || parsed > 1'000'000'000) {
    throw ConfigError(-1, var + "='" + value + "' is not a valid number (expected an integer >= " +
                              std::to_string(min_value) + ")");
  }
  return static_cast<int>(parsed);
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

JobEnv resolve_job_env(const EnvLookup& lookup) {
  JobEnv env;
  auto get = [&](const char* name) { return lookup(name); };

  for (const Family& f : kFamilies) {
    auto rank = get(f.rank);
    auto world = get(f.world);
    if (!rank && !world) continue;
    if (!world) throw ConfigError(-1, std::string(f.rank) + " is set but " + f.world + " is not");
    if (!rank) throw ConfigError(-1, std::string(f.world) + " is set but " + f.rank + " is not");
    env.source = f.name;
    env.rank = parse_int(f.rank, *rank, 0);
    env.world_size = parse_int(f.world, *world, 1);
    if (env.rank >= env.world_size) {
      throw ConfigError(env.rank, std::string(f.rank) + "=" + *rank + " is not below " + f.world +
                                      "=" + *world);
    }
    // Without local variables the job is taken to run on one machine.
    auto local_rank = get(f.local_rank);
    auto local_world = get(f.local_world);
    env.local_rank = local_rank ? parse_int(f.local_rank, *local_rank, 0) : env.rank;
    env.local_world_size = local_world ? parse_int(f.local_world, *local_world, 1) : env.world_size;
    if (env.local_rank >= env.local_world_size && local_world) {
      throw ConfigError(env.rank, std::string(f.local_rank) + "=" + *local_rank + " is not below " +
                                      f.local_world + "=" + *local_world);
    }
    break;
  }

  auto addr = get("COHORT_MASTER_ADDR");
  if (!addr) addr = get("MASTER_ADDR");
  if (addr) {
    if (addr->empty()) throw ConfigError(env.rank, "MASTER_ADDR is set but empty");
    env.master_addr = *addr;
  }
  const char* port_var = "COHORT_MASTER_PORT";
  auto port = get(port_var);
  if (!port) {
    port_var = "MASTER_PORT";
    port = get(port_var);
  }
  if (port) {
    env.master_port = parse_int(port_var, *port, 1);
    if (env.master_port > 65535) {
      throw ConfigError(env.rank, std::string(port_var) + "=" + *port + " is not a TCP port");
    }
  }
  if (auto file = get("COHORT_STORE_FILE")) {
    if (file->empty() || file->front() != '/') {
      throw ConfigError(env.rank, "COHORT_STORE_FILE='" + *file + "' is not an absolute path");
    }
    env.store_file = *file;
  }
  if (auto hosted = get("COHORT_STORE_HOSTED")) {
    if (*hosted != "0" && *hosted != "1") throw ConfigError(env.rank, "COHORT_STORE_HOSTED='" + *hosted + "' is not 0 or 1");
    env.store_hosted = *hosted == "1";
  }
  if (auto key = get("COHORT_JOB_KEY")) env.job_key = *key;
  if (auto node = get("COHORT_NODE_RANK")) env.node_rank = parse_int("COHORT_NODE_RANK", *node, 0);
  if (auto r = get("COHORT_RESTART_COUNT")) {
    env.restart_count = parse_int("COHORT_RESTART_COUNT", *r, 0);
  } else if (auto r2 = get("TORCHELASTIC_RESTART_COUNT")) {
    env.restart_count = parse_int("TORCHELASTIC_RESTART_COUNT", *r2, 0);
  }
  if (auto g = get("COHORT_GENERATION")) env.generation = parse_int("COHORT_GENERATION", *g, 0);
  return env;
}

}  // namespace cohort
