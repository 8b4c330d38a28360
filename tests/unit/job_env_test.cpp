// resolve_job_env: precedence of the variable families, defaults, and clear errors.
#include <gtest/gtest.h>

#include <map>

#include "cohort/error.h"
#include "cohort/job_env.h"

namespace {

cohort::EnvLookup env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(std::map<std::string, std::string> vars) {
  try {
    cohort::resolve_job_env(env(std::move(vars)));
  } catch (const cohort::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(JobEnv, NothingSetIsAWorldOfOne) {
  auto e = cohort::resolve_job_env(env({}));
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(JobEnv, Torchrun) {
  auto e = cohort::resolve_job_env(env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_EQ(e.restart_count, 2);
}

TEST(JobEnv, CohortVariablesWinOverTorchrunOnes) {
  auto e = cohort::resolve_job_env(env({{"COHORT_RANK", "1"}, {"COHORT_WORLD_SIZE", "2"}, {"RANK", "5"},
                                        {"WORLD_SIZE", "9"}, {"COHORT_MASTER_PORT", "4000"}, {"MASTER_PORT", "5000"},
                                        {"COHORT_RESTART_COUNT", "4"}, {"TORCHELASTIC_RESTART_COUNT", "1"}}));
  EXPECT_EQ(e.source, "cohort");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_port, 4000);
  EXPECT_EQ(e.restart_count, 4);
}

TEST(JobEnv, TorchrunWinsOverMpiAndSlurm) {
  auto e = cohort::resolve_job_env(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.world_size, 2);
}

TEST(JobEnv, OpenMpi) {
  auto e = cohort::resolve_job_env(env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                        {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 2);
}

TEST(JobEnv, Slurm) {
  auto e = cohort::resolve_job_env(env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}}));
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 6);
  EXPECT_EQ(e.local_rank, 1);
}

TEST(JobEnv, HalfSetEnvironmentNamesTheMissingVariable) {
  EXPECT_EQ(error_of({{"RANK", "0"}}), "cohort: RANK is set but WORLD_SIZE is not");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}}), "cohort: WORLD_SIZE is set but RANK is not");
  EXPECT_EQ(error_of({{"COHORT_RANK", "0"}}), "cohort: COHORT_RANK is set but COHORT_WORLD_SIZE is not");
  EXPECT_EQ(error_of({{"SLURM_NTASKS", "2"}}), "cohort: SLURM_NTASKS is set but SLURM_PROCID is not");
}

TEST(JobEnv, InvalidValuesAreNamed) {
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x' is not a valid number"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE='0'"), std::string::npos);
  EXPECT_NE(error_of({{"MASTER_PORT", "70000"}}).find("MASTER_PORT=70000 is not a TCP port"), std::string::npos);
  EXPECT_NE(error_of({{"MASTER_ADDR", ""}}).find("MASTER_ADDR is set but empty"), std::string::npos);
  EXPECT_NE(error_of({{"COHORT_STORE_FILE", "store"}}).find("COHORT_STORE_FILE='store' is not an absolute path"),
            std::string::npos);
}

TEST(JobEnv, StoreFile) {
  EXPECT_EQ(cohort::resolve_job_env(env({})).store_file, "");  // the TCPStore
  const auto e = cohort::resolve_job_env(env({{"COHORT_RANK", "1"}, {"COHORT_WORLD_SIZE", "2"}, {"COHORT_STORE_FILE", "/run/job/store-0"}}));
  EXPECT_EQ(e.store_file, "/run/job/store-0");
}

TEST(JobEnv, StoreHostedOutsideTheWorkers) {
  EXPECT_FALSE(cohort::resolve_job_env(env({})).store_hosted);  // rank 0 hosts the TCPStore
  EXPECT_TRUE(cohort::resolve_job_env(env({{"COHORT_STORE_HOSTED", "1"}})).store_hosted);
  EXPECT_NE(error_of({{"COHORT_STORE_HOSTED", "yes"}}).find("COHORT_STORE_HOSTED='yes' is not 0 or 1"), std::string::npos);
}

}  // namespace
