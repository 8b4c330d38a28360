// The presets. "this-machine" is read off one of cohort's own runs on the 2-core machine (see
// this_machine()); the others are large jobs from published setups.
#include "presets.h"

namespace cohort::sim {
namespace {

Params this_machine() {
  // Read off a run's event log on the 2-core machine (docs/sim.md gives the command): the
  // Fashion-MNIST CNN, 2 ranks of 1 thread, medians of steps 20-150 of the phases, comm_bytes and
  // busbw (the machine was busy then). `cohort sim calibrate` fits them from such logs.
  Params p;
  p.nodes = 1;
  p.workers_per_node = 2;
  p.cores_per_node = 2;
  p.threads_per_worker = 1;
  p.params = 421642;  // the example's CNN: comm_bytes 1,686,600 per step in fp32
  p.batch_per_worker = 64;
  p.data_s = 0.00025;
  p.forward_s = 0.029;
  p.backward_s = 0.027;
  p.optimizer_s = 0.0004;
  p.compute_cv = 0.08;
  p.bucket_mb = 25;
  p.intra_latency_s = 40e-6;
  p.intra_bw = 3.2e8;  // busbw of the run's allreduces (Gloo over loopback)
  p.checkpoint_every = 200;
  p.checkpoint_bw = 1.0e9;
  p.detect_s = 0.5;
  p.restart_s = 1.2;
  p.warm_restart_s = 0.2;
  p.hours = 0.05;
  return p;
}

Params sixty_four_gpus() {
  // 8 nodes x 8 GPUs, a 1.3B-parameter model in bf16 under DDP; one node failure a day in the job
  // (node MTBF 8 days), checkpoints every 500 steps in the background, one warm spare.
  Params p;
  p.nodes = 8;
  p.workers_per_node = 8;
  p.params = 1.3e9;
  p.bytes_per_grad = 2;
  p.bytes_per_param = 2;
  p.optimizer_bytes_per_param = 12;  // fp32 master weights and Adam's two moments
  p.batch_per_worker = 8;
  p.flops_per_sample = 6.0 * 1.3e9 * 2048;  // 6 N FLOPs per token, 2048 tokens a sample
  p.device_flops = 300e12;
  p.compute_cv = 0.02;
  p.bucket_mb = 25;
  p.algorithm = Algorithm::best;
  p.intra_latency_s = 5e-6;
  p.intra_bw = 150e9;       // NVLink
  p.shm_bw = 150e9;
  p.inter_latency_s = 10e-6;
  p.inter_bw = 50e9;        // 400 Gbit/s of InfiniBand per node
  p.node_mtbf_h = 8 * 24;
  p.detect_s = 5;
  p.restart_s = 60;
  p.warm_restart_s = 10;
  p.spare_nodes = 1;
  p.repair_h = 4;
  p.checkpoint_every = 500;
  p.checkpoint_bw = 2e9;
  p.restore_bw = 4e9;
  p.hours = 24;
  return p;
}

Params llama3_like() {
  // 4,096 GPUs (512 nodes x 8) at the failure rate of Llama 3's pre-training: 419 unexpected
  // interruptions in 54 days on 16,384 GPUs ("The Llama 3 Herd of Models", Meta 2024, section
  // 3.3.4), i.e. one per 2,048-node job every 3.1 h: a node MTBF of about 6,300 h. An 8B model
  // under ZeRO-1, 8192-token samples on H100-class GPUs at 400 TFLOP/s sustained.
  Params p;
  p.nodes = 512;
  p.workers_per_node = 8;
  p.params = 8e9;
  p.bytes_per_grad = 2;
  p.bytes_per_param = 2;
  p.optimizer_bytes_per_param = 12;
  p.zero_level = 1;
  p.batch_per_worker = 1;
  p.flops_per_sample = 6.0 * 8e9 * 8192;
  p.device_flops = 400e12;
  p.compute_cv = 0.02;
  p.straggle_prob = 0.00005;  // about one straggling worker every 5 steps
  p.bucket_mb = 500;          // one transformer layer's gradients per collective, as FSDP's units
  p.algorithm = Algorithm::best;
  p.intra_latency_s = 5e-6;
  p.intra_bw = 300e9;
  p.shm_bw = 300e9;
  p.inter_latency_s = 15e-6;
  p.inter_bw = 400e9;       // 8 x 400 Gbit/s RoCE per node
  p.node_mtbf_h = 6300;
  p.failure_law = FailureLaw::weibull;
  p.weibull_shape = 0.8;
  p.detect_s = 10;
  p.hang_detect_s = 120;
  p.node_mtbh_h = 20000;
  p.restart_s = 300;
  p.warm_restart_s = 30;
  p.spare_nodes = 8;
  p.repair_h = 12;
  p.checkpoint_every = 300;
  p.checkpoint_bw = 2e9;
  p.restore_bw = 4e9;
  p.hours = 24;
  p.timeline_workers = 64;
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"this-machine", "this machine, from a run's log (Fashion-MNIST CNN, 2 workers)", this_machine()},
      {"64-gpus", "64 GPUs, one node fails a day", sixty_four_gpus()},
      {"llama3-4096", "4,096 GPUs like Llama 3's run", llama3_like()},
  };
  return all;
}

const Preset* find_preset(const std::string& name) {
  for (const auto& p : presets()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

}  // namespace cohort::sim
