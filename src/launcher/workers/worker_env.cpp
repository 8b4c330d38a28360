// The worker environment contract. See worker_env.h and docs/launcher.md.
#include "launcher/workers/worker_env.h"

#include <set>
#include <string>

extern char** environ;

namespace cohort::launcher {

std::vector<std::string> worker_variables(const WorkerPlace& p) {
  auto var = [](const char* name, const std::string& value) { return std::string(name) + "=" + value; };
  auto num = [&](const char* name, int value) { return var(name, std::to_string(value)); };
  std::vector<std::string> vars{
      // cohort's own (highest precedence in cohort::init)
      num("COHORT_RANK", p.job.rank),
      num("COHORT_WORLD_SIZE", p.job.world_size),
      num("COHORT_LOCAL_RANK", p.job.local_rank),
      num("COHORT_LOCAL_WORLD_SIZE", p.job.local_world_size),
      num("COHORT_NODE_RANK", p.job.node_rank),
      num("COHORT_NNODES", p.nnodes),
      var("COHORT_MASTER_ADDR", p.job.master_addr),
      num("COHORT_MASTER_PORT", p.job.master_port),
      num("COHORT_RESTART_COUNT", p.job.restart_count),
      num("COHORT_THREADS", p.threads),
      // torchrun's, for programs written against torch.distributed conventions
      num("RANK", p.job.rank),
      num("WORLD_SIZE", p.job.world_size),
      num("LOCAL_RANK", p.job.local_rank),
      num("LOCAL_WORLD_SIZE", p.job.local_world_size),
      num("GROUP_RANK", p.job.node_rank),
      num("GROUP_WORLD_SIZE", p.nnodes),
      num("ROLE_RANK", p.job.rank),
      num("ROLE_WORLD_SIZE", p.job.world_size),
      var("MASTER_ADDR", p.job.master_addr),
      num("MASTER_PORT", p.job.master_port),
      num("TORCHELASTIC_RESTART_COUNT", p.job.restart_count),
      num("TORCHELASTIC_MAX_RESTARTS", p.max_restarts),
      // intra-op threads for OpenMP / MKL / libtorch, and OpenBLAS's own pool (Debian's libtorch
      // calls BLAS through libblas.so.3 without setting OpenBLAS's threads)
      num("OMP_NUM_THREADS", p.threads),
      num("OPENBLAS_NUM_THREADS", p.threads),
  };
  if (!p.job.store_file.empty()) vars.push_back(var("COHORT_STORE_FILE", p.job.store_file));
  if (p.job.store_hosted) vars.push_back(var("COHORT_STORE_HOSTED", "1"));
  return vars;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base,
                                           const std::vector<std::string>& overrides) {
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::set<std::string> replaced;
  for (const auto& o : overrides) replaced.insert(name_of(o));
  std::vector<std::string> out;
  out.reserve(base.size() + overrides.size());
  for (const auto& b : base) {
    if (!replaced.count(name_of(b))) out.push_back(b);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base, const WorkerPlace& place,
                                            const std::vector<std::string>& extra) {
  std::vector<std::string> vars = worker_variables(place);
  vars.insert(vars.end(), extra.begin(), extra.end());
  return merge_environment(base, vars);
}

}  // namespace cohort::launcher
