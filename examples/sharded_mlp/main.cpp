// A deep MLP trained with DDP or with sharded data parallel (ZeRO-1/2/3) on synthetic data —
// the example of training a model whose Adam state does not fit in one worker (run_under_limit.sh),
// the memory probe of the sharded tests, and the program the sharded benchmark times.
//
//   RANK=0 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./sharded_mlp --mode zero3 ...
//
// Prints one JSON line per rank at the end: throughput, bytes communicated per step, and memory
// (baseline RSS after init, peak RSS, their difference: the training state and its transients).
// Running out of memory (an address-space limit from prlimit, or a full machine) ends the program
// with a one-line error naming the rank and exit status 3 — not a crash, not a silent kill.
#include <cohort/cohort.h>
#include <malloc.h>  // mallopt: freed big blocks go back to the OS, so RSS follows live memory

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_checks.h"  // examples::kFinite, examples::parse_command_line

namespace {

// "VmRSS", "VmHWM" (peak RSS), "VmSize", "VmPeak" of this process, in MiB.
double proc_status_mb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0;
}

bool is_out_of_memory(const std::string& what) {
  return what.find("can't allocate memory") != std::string::npos || what.find("Cannot allocate memory") != std::string::npos ||
         what.find("bad_alloc") != std::string::npos || what.find("std::bad_alloc") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deep MLP: DDP vs sharded data parallel"};
  std::string mode = "zero3";
  int layers = 8, width = 512, batch = 16, steps = 6, warmup = 2, threads = 1;
  double unit_cap_mb = 25, lr = 1e-3;
  int mmap_threshold_kb = 0;
  std::string rs = "auto", ag = "auto", optimizer_name = "fused_adam";
  app.add_option("--mode", mode, "ddp, zero1, zero2 or zero3")->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3"}));
  app.add_option("--layers", layers, "hidden Linear(width, width) layers")->check(CLI::Range(1, 100000));
  app.add_option("--width", width, "hidden width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch", batch, "samples per rank and step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "training steps (after warm-up)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "steps not timed")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "intra-op threads per rank")->check(CLI::Range(1, 1024));
  app.add_option("--unit-cap-mb", unit_cap_mb, "zero1/zero2: unit size")->check(examples::kFinite)->check(CLI::PositiveNumber);
  app.add_option("--reduce-scatter", rs, "auto, ring, shm or allreduce_slice")
      ->check(CLI::IsMember({"auto", "ring", "shm", "allreduce_slice"}));
  app.add_option("--allgather", ag, "auto, backend, shm or shm_allreduce")
      ->check(CLI::IsMember({"auto", "backend", "shm", "shm_allreduce"}));
  app.add_option("--lr", lr, "Adam learning rate")->check(examples::kFinite)->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer_name, "fused_adam (cohort::FusedAdam, one pass) or adam (torch::optim::Adam)")
      ->check(CLI::IsMember({"adam", "fused_adam"}));
  app.add_option("--mmap-threshold-kb", mmap_threshold_kb,
                 "blocks from this size on are mmap'd and returned to the OS when freed, so RSS follows live "
                 "memory (the memory probe and run_under_limit.sh pass 256); 0, the default: cohort::init() makes "
                 "malloc keep freed memory for the next step (cohort/memory_reuse.h)")
      ->check(CLI::NonNegativeNumber);
  if (auto status = examples::parse_command_line(app, argc, argv, "sharded_mlp")) return *status;

  // A fixed threshold makes RSS follow live memory, and costs time: every big temporary is a fresh
  // mapping, page-faulted and cleared by the kernel each step (docs/BENCHMARKS.md, issue 7). So it
  // is only for the memory measurements, not the default.
  if (mmap_threshold_kb > 0) mallopt(M_MMAP_THRESHOLD, mmap_threshold_kb * 1024);
  int rank = -1;
  try {
    cohort::InitOptions init;
    init.threads = threads;
    init.retain_freed_memory = mmap_threshold_kb == 0;  // else RSS would keep the peak heap
    auto ctx = cohort::init(init);
    rank = ctx->rank();
    const double baseline_mb = proc_status_mb("VmRSS");

    torch::manual_seed(0);  // the same model on every rank (rank 0's is broadcast anyway)
    torch::nn::Sequential net;
    for (int l = 0; l < layers; ++l) {
      net->push_back(torch::nn::Linear(width, width));
      net->push_back(torch::nn::ReLU());
    }
    net->push_back(torch::nn::Linear(width, 10));
    net->push_back(torch::nn::LogSoftmax(1));
    int64_t params = 0;
    for (const auto& p : net->parameters()) params += p.numel();
    nlohmann::json phases{{"model_built_mb", proc_status_mb("VmRSS") - baseline_mb}};

    std::function<torch::Tensor(torch::Tensor)> forward;
    std::function<nlohmann::json()> comm_stats;
    std::vector<torch::Tensor> trainable;
    std::shared_ptr<torch::nn::Module> keep;
    if (mode == "ddp") {
      auto model = cohort::DistributedDataParallel(net, ctx);
      keep = model.ptr();
      trainable = model->parameters();
      forward = [model](torch::Tensor x) mutable { return model->forward(x); };
      comm_stats = [model] { return nlohmann::json{{"bytes_allreduced", model->stats().bytes_allreduced}}; };
    } else {
      cohort::ShardedOptions o;
      o.level = static_cast<cohort::ShardingLevel>(mode.back() - '0');
      o.unit_cap_mb = unit_cap_mb;
      if (rs == "ring") o.reduce_scatter = cohort::ReduceScatterAlgo::ring;
      if (rs == "allreduce_slice") o.reduce_scatter = cohort::ReduceScatterAlgo::allreduce_slice;
      if (rs == "shm") o.reduce_scatter = cohort::ReduceScatterAlgo::shm;
      if (ag == "backend") o.allgather = cohort::AllgatherAlgo::backend;
      if (ag == "shm") o.allgather = cohort::AllgatherAlgo::shm;
      if (ag == "shm_allreduce") o.allgather = cohort::AllgatherAlgo::shm_allreduce;
      auto model = cohort::ShardedDataParallel(net, ctx, o);
      keep = model.ptr();
      trainable = model->parameters();
      forward = [model](torch::Tensor x) mutable { return model->forward(x); };
      comm_stats = [model] {
        const auto s = model->stats();
        return nlohmann::json{{"bytes_gathered", s.bytes_gathered}, {"bytes_reduced", s.bytes_reduced},
                              {"units", s.num_units}, {"max_units_gathered", s.max_units_gathered}};
      };
    }
    net = nullptr;  // the wrapper holds the module
    // Both are a torch::optim::Adam (same state, same checkpoints); FusedAdam makes one pass per step.
    std::unique_ptr<torch::optim::Optimizer> optimizer_ptr;
    if (optimizer_name == "fused_adam")
      optimizer_ptr = std::make_unique<cohort::FusedAdam>(trainable, torch::optim::AdamOptions(lr));
    else
      optimizer_ptr = std::make_unique<torch::optim::Adam>(trainable, torch::optim::AdamOptions(lr));
    auto& optimizer = *optimizer_ptr;
    phases["wrapped_mb"] = proc_status_mb("VmRSS") - baseline_mb;
    phases["wrapped_peak_mb"] = proc_status_mb("VmHWM") - baseline_mb;

    auto gen = at::detail::createCPUGenerator(1000 + rank);
    const auto x = torch::randn({batch, width}, gen), y = torch::randint(0, 10, {batch}, gen, torch::kLong);
    double loss = 0;
    auto t0 = std::chrono::steady_clock::now();
    nlohmann::json before;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup) {
        t0 = std::chrono::steady_clock::now();
        before = comm_stats();
      }
      optimizer.zero_grad();
      auto l = torch::nll_loss(forward(x), y);
      if (s == 1) phases["step2_after_forward_mb"] = proc_status_mb("VmRSS") - baseline_mb, phases["peak_after_forward_mb"] = proc_status_mb("VmHWM") - baseline_mb;
      l.backward();
      if (s == 1) phases["step2_after_backward_mb"] = proc_status_mb("VmRSS") - baseline_mb, phases["peak_after_backward_mb"] = proc_status_mb("VmHWM") - baseline_mb;
      optimizer.step();
      if (s == 1) phases["step2_after_step_mb"] = proc_status_mb("VmRSS") - baseline_mb;
      loss = l.item<double>();
      if (s == 0) phases["first_step_peak_mb"] = proc_status_mb("VmHWM") - baseline_mb;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json after = comm_stats(), per_step;
    for (auto& [k, v] : after.items())
      if (k.rfind("bytes", 0) == 0) per_step[k] = steps ? (v.get<int64_t>() - before[k].get<int64_t>()) / steps : 0;
    const double peak_mb = proc_status_mb("VmHWM");
    nlohmann::json out{{"mode", mode},
                       {"optimizer", optimizer_name},
                       {"rank", rank},
                       {"world", ctx->world_size()},
                       {"params", params},
                       {"loss", loss},
                       {"samples_per_s", steps * batch * ctx->world_size() / seconds},
                       {"step_ms", 1000 * seconds / std::max(steps, 1)},
                       {"bytes_per_step", per_step},
                       {"stats", after},
                       {"baseline_mb", baseline_mb},
                       {"peak_mb", peak_mb},
                       {"state_mb", peak_mb - baseline_mb},
                       {"phases", phases},
                       {"vm_peak_mb", proc_status_mb("VmPeak")}};
    std::cout << out.dump() << std::endl;
    ctx->barrier();
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string who = rank >= 0 ? "rank " + std::to_string(rank) : std::string("cohort");
    if (is_out_of_memory(what)) {
      // One write: the ranks share the pipe, and a line written in pieces interleaves with theirs.
      std::ostringstream line;
      line << who << ": out of memory training the " << mode << " model (peak RSS "
           << static_cast<int64_t>(proc_status_mb("VmHWM")) << " MiB, address space "
           << static_cast<int64_t>(proc_status_mb("VmPeak")) << " MiB): " << what.substr(0, what.find('\n'))
           << "; use --mode zero3 or more ranks\n";
      std::cerr << line.str() << std::flush;
      return 3;
    }
    std::cerr << who << ": " << what.substr(0, what.find('\n')) << std::endl;
    return 1;
  }
  return 0;
}
