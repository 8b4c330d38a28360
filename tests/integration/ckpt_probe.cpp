// ckpt_probe: a training process whose checkpoints are easy to judge, for the crash, full-disk
// and interoperability tests (checkpoint_process_test.cpp).
//
// The state: one parameter of --floats values and SGD momentum of the same size. After step s
// every parameter value is s and every momentum value is -s, so a checkpoint is "complete" exactly
// when all its values equal its step (and the momentum's are the negative).
//   --mode loop    restore (and check what was restored), then save at every step, forever
//                  (until killed); prints "restored S" and "saved S" lines
//   --mode steps   like loop, but stops at step --steps and exits 0 (--steps 0: restore only);
//                  prints every failed save
//   --late-ms M    every rank but 0 waits M ms before each save, so that rank 0 asks for their
//                  commit parts before they are there (the forged-part test, issue 22)
//   --hold-at S --hold-for FILE   every rank waits before step S until FILE exists (at most 120 s),
//                  so that a test's stranger acts at a known point of the run
//   --snapshot-dir D  in-memory snapshots into D at every step instead of checkpoints on disk
//                  (the full-tmpfs test); a failed one is cohort's warning, training goes on
//   --mode export  writes one checkpoint of a small model with known values and expected.json with
//                  those values as torch sees them (for an independent safetensors reader)
#include <CLI/CLI.hpp>
#include <cohort/cohort.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <csignal>
#include <fstream>
#include <thread>
#include <unistd.h>
#include <iostream>

#include "runtime/torch_compat_internal.h"

namespace {

struct Probe : torch::nn::Module {
  explicit Probe(int64_t floats) : w(register_parameter("w", torch::zeros({floats}))) {}
  torch::Tensor w;
};

// Makes parameter and momentum equal to (step, -step): what an SGD step on this loss would not
// give, but what makes completeness checkable value by value.
void set_step_values(Probe& probe, torch::optim::SGD& sgd, int64_t step) {
  torch::NoGradGuard no_grad;
  probe.w.fill_(static_cast<double>(step));
  auto& state = sgd.state();
  auto key = cohort::optimizer_state_key<std::decay_t<decltype(state)>>(probe.w);
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(torch::full_like(probe.w, -static_cast<double>(step)));
  state[key] = std::move(s);
}

void check_restored(Probe& probe, torch::optim::SGD& sgd, int64_t step) {
  auto& state = sgd.state();
  auto it = state.find(cohort::optimizer_state_key<std::decay_t<decltype(state)>>(probe.w));
  const bool params_ok = probe.w.eq(static_cast<double>(step)).all().item<bool>();
  const bool momentum_ok =
      it != state.end() &&
      static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().eq(-static_cast<double>(step)).all().item<bool>();
  if (!params_ok || !momentum_ok) {
    std::cerr << "ckpt_probe: restored step " << step << " is INCOMPLETE (parameters "
              << (params_ok ? "ok" : "wrong") << ", momentum " << (momentum_ok ? "ok" : "wrong") << ")" << std::endl;
    std::exit(3);
  }
}

int run_training(const std::string& dir, int64_t floats, bool async, int64_t steps, int keep, bool exit_at_once,
                 int late_ms, int64_t hold_at, const std::string& hold_for, const std::string& snapshot_dir) {
  auto ctx = cohort::init();
  Probe probe(floats);
  torch::optim::SGD sgd(probe.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  cohort::CheckpointOptions options;
  options.every_steps = snapshot_dir.empty() ? 1 : 0;
  options.keep_last = keep;
  options.async = async;
  if (!snapshot_dir.empty()) {
    options.snapshot_every_steps = 1;
    options.snapshot_dir = snapshot_dir;
  }
  cohort::Checkpointer checkpoints(dir, ctx, options);
  if (auto info = checkpoints.restore_latest(cohort::TrainingState{&probe, &sgd, nullptr})) {
    check_restored(probe, sgd, info->step);
    std::cout << "restored " << info->step << std::endl;
  } else {
    std::cout << "restored none" << std::endl;
  }
  for (int64_t s = checkpoints.step() + 1; s <= steps; ++s) {
    if (s == hold_at) {
      for (int i = 0; i < 2400 && access(hold_for.c_str(), F_OK) != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::cout << "held at " << s << (access(hold_for.c_str(), F_OK) == 0 ? "" : " (gave up waiting)") << std::endl;
    }
    set_step_values(probe, sgd, s);
    if (late_ms > 0 && ctx->rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    std::string before = checkpoints.last_error();
    if (checkpoints.maybe_save(cohort::TrainingState{&probe, &sgd, nullptr}) && !async) std::cout << "saved " << s << std::endl;
    if (checkpoints.last_error() != before && !checkpoints.last_error().empty())
      std::cout << "save failed: " << checkpoints.last_error() << std::endl;
  }
  if (exit_at_once) {
    std::cout << "exit() with a save in flight" << std::endl;
    std::exit(0);  // no destructors: cohort's exit handler must finish the save
  }
  try {
    checkpoints.wait();
  } catch (const cohort::CheckpointError& e) {
    std::cout << "save failed: " << e.what() << std::endl;
  }
  std::cout << "trained to step " << steps << std::endl;
  return 0;
}

// A model with a parameter of each common dtype and a buffer, values known in advance.
int run_export(const std::string& dir) {
  auto ctx = cohort::init();
  struct Net : torch::nn::Module {
    Net() {
      register_parameter("weight", torch::arange(0, 12, torch::kFloat).reshape({3, 4}).mul(0.37).sub(1.5));
      register_parameter("bias", torch::tensor({1e-8, -2.5, 3.25e10}, torch::kDouble));
      register_buffer("steps", torch::tensor({int64_t{7}, int64_t{-9}, int64_t{1} << 40}, torch::kLong));
      register_buffer("mask", torch::tensor({true, false, true}));
      register_parameter("half", torch::tensor({0.5, -1.25, 65504.0}, torch::kHalf));
    }
  } net;
  torch::optim::Adam adam(net.parameters(), torch::optim::AdamOptions(0.001));
  cohort::Checkpointer checkpoints(dir, ctx, {.async = false});
  checkpoints.metadata()["purpose"] = "interop test";
  checkpoints.set_step(5);
  checkpoints.save(cohort::TrainingState{&net, &adam, nullptr});
  nlohmann::json expected;
  for (const auto& item : net.named_parameters()) {
    auto t = item.value().to(torch::kDouble).flatten();
    expected[item.key()] = std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  for (const auto& item : net.named_buffers()) {
    auto t = item.value().to(torch::kLong).flatten();
    expected[item.key()] = std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  std::ofstream(dir + "/expected.json") << expected.dump();
  std::cout << "exported " << dir << "/step-00000005" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint test probe"};
  std::string dir, mode = "loop";
  int64_t floats = 1 << 20, steps = 0;
  bool async = false, ignore_xfsz = false, exit_at_once = false;
  int keep = 2, late_ms = 0;
  int64_t hold_at = -1;
  std::string hold_for, snapshot_dir;
  app.add_option("--dir", dir)->required();
  app.add_option("--snapshot-dir", snapshot_dir);
  app.add_option("--late-ms", late_ms);
  app.add_option("--hold-at", hold_at);
  app.add_option("--hold-for", hold_for);
  app.add_option("--mode", mode)->check(CLI::IsMember({"loop", "steps", "export"}));
  app.add_option("--floats", floats);
  app.add_option("--steps", steps);
  app.add_option("--keep", keep);
  app.add_flag("--async", async);
  app.add_flag("--ignore-sigxfsz", ignore_xfsz, "report a file size limit as an error instead of dying");
  app.add_flag("--exit-at-once", exit_at_once, "call exit() right after the last save started");
  CLI11_PARSE(app, argc, argv);
  if (ignore_xfsz) std::signal(SIGXFSZ, SIG_IGN);
  try {
    if (mode == "export") return run_export(dir);
    return run_training(dir, floats, async, mode == "loop" ? INT64_MAX : steps, keep, exit_at_once, late_ms, hold_at,
                        hold_for, snapshot_dir);
  } catch (const std::exception& e) {
    std::cerr << "ckpt_probe: " << e.what() << std::endl;
    return 1;
  }
}
