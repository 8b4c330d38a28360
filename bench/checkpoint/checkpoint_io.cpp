// checkpoint_io: the Checkpointer's speed on about 1 GB of training state (issue 4), side by side
// with `dd ... conv=fsync` writing the same number of bytes to the same directory.
//
// State: parameters of --param-mb MiB in 64 MiB tensors plus SGD momentum of the same size (so
// 1 GiB of state for --param-mb 512), world of one. Each round, in this order so noise hits all:
//   dd       dd if=/dev/zero of=DIR/dd.bin bs=4M count=... conv=fsync  (the disk's streaming rate)
//   save     Checkpointer::save (synchronous: written, fsynced, committed)
//   restore  restore_latest into a second model and optimizer (files read, hashed, copied); with
//            --cold-restore the page cache is dropped first (as root), as after a restart elsewhere
//   async    save_async: the time training is blocked (the snapshot), then wait() for the rest
// Prints one JSON line per round and a summary with medians and ratios.
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

struct Big : torch::nn::Module {
  Big(int64_t mib, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const int64_t per = 16 << 20;  // 64 MiB of floats per tensor
    for (int64_t i = 0, left = mib << 18; left > 0; ++i, left -= per)
      register_parameter("layer" + std::to_string(i), torch::rand({std::min(per, left)}, gen));
  }
};

void give_momentum(Big& model, torch::optim::SGD& sgd) {
  for (auto& p : model.parameters()) p.mutable_grad() = torch::ones_like(p);
  sgd.step();  // creates every momentum buffer
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint save/restore throughput vs dd conv=fsync"};
  std::string dir = "/tmp/cohort_checkpoint_bench";
  int64_t param_mb = 512;
  int rounds = 3;
  bool cold_restore = false;
  app.add_option("--dir", dir, "where to write (the disk under test)")->capture_default_str();
  app.add_option("--param-mb", param_mb, "MiB of parameters; the state is twice that")->capture_default_str();
  app.add_option("--rounds", rounds)->capture_default_str();
  app.add_flag("--cold-restore", cold_restore, "drop the page cache before each restore (needs root)");
  CLI11_PARSE(app, argc, argv);

  auto ctx = cohort::init();
  cohort::set_num_threads(1);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Big model(param_mb, 1), restored_model(param_mb, 2);
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD restored_sgd(restored_model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  give_momentum(model, sgd);
  const double gib = 2.0 * param_mb / 1024.0;
  const int64_t dd_blocks = 2 * param_mb / 4;
  cohort::Checkpointer checkpoints(dir + "/ck", ctx, {.keep_last = 1});
  std::vector<double> dd, save, restore, blocked, async_total;
  for (int r = 0; r < rounds; ++r) {
    auto t = clock_type::now();
    const std::string cmd = "dd if=/dev/zero of=" + dir + "/dd.bin bs=4M count=" + std::to_string(dd_blocks) +
                            " conv=fsync status=none && rm " + dir + "/dd.bin";
    if (std::system(cmd.c_str()) != 0) return 1;
    dd.push_back(seconds_since(t));

    checkpoints.set_step(3 * r + 1);
    t = clock_type::now();
    checkpoints.save({&model, &sgd, nullptr});
    save.push_back(seconds_since(t));

    if (cold_restore && std::system("sync && echo 3 > /proc/sys/vm/drop_caches") != 0) {
      std::cerr << "checkpoint_io: --cold-restore could not drop the page cache (root needed)" << std::endl;
      return 1;
    }
    t = clock_type::now();
    cohort::Checkpointer reader(dir + "/ck", ctx);
    const auto info = reader.restore_latest({&restored_model, &restored_sgd, nullptr});
    restore.push_back(seconds_since(t));
    if (!info || cohort::parameters_checksum(restored_model) != cohort::parameters_checksum(model)) {
      std::cerr << "checkpoint_io: restored parameters differ" << std::endl;
      return 1;
    }

    checkpoints.set_step(3 * r + 2);
    t = clock_type::now();
    checkpoints.save_async({&model, &sgd, nullptr});
    blocked.push_back(seconds_since(t));
    checkpoints.wait();
    async_total.push_back(seconds_since(t));
    std::cout << nlohmann::json{{"round", r},          {"gib", gib},           {"dd_s", dd.back()},
                                {"save_s", save.back()}, {"restore_s", restore.back()}, {"async_blocked_s", blocked.back()},
                                {"async_total_s", async_total.back()}}
                     .dump()
              << std::endl;
  }
  // The first async save allocates its staging buffers (page faults); later ones reuse them.
  std::vector<double> steady(blocked.begin() + (blocked.size() > 1 ? 1 : 0), blocked.end());
  std::printf("\nstate %.2f GiB, %d rounds (medians)\n", gib, rounds);
  std::printf("  dd conv=fsync      %6.2f s  %6.2f GiB/s\n", median(dd), gib / median(dd));
  std::printf("  save (sync)        %6.2f s  %6.2f GiB/s  = %.0f%% of dd\n", median(save), gib / median(save),
              100.0 * median(dd) / median(save));
  std::printf("  restore            %6.2f s  %6.2f GiB/s  (files in the page cache)\n", median(restore),
              gib / median(restore));
  std::printf("  async: blocked     %6.3f s  = %.1f%% of the sync save (first: %.3f s)\n", median(steady),
              100.0 * median(steady) / median(save), blocked.front());
  std::printf("  async: until done  %6.2f s\n", median(async_total));
  std::filesystem::remove_all(dir);
  return 0;
}
