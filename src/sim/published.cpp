// Horovod's published scaling (Sergeev & Del Balso, "Horovod: fast and easy distributed deep
// learning in TensorFlow", arXiv:1802.05799, and horovod's docs/benchmarks.rst): tf_cnn_benchmarks,
// batch 64 per GPU, servers of 4 Pascal (P100) GPUs joined by 25 Gbit/s RoCE, NCCL 2's ring
// allreduce over all GPUs, Tensor Fusion's 64 MB buffer. On 32 servers (128 GPUs): 90 % for
// Inception V3 and ResNet-101, 79 % for VGG-16; on 128 servers (512 GPUs): 90 %, 90 % and 68 %.
//
// The inputs beyond the paper's, and where they come from:
// - one P100's compute per step, from TensorFlow's published benchmarks on a DGX-1 (P100,
//   synthetic data, batch 64; tensorflow.org/performance/benchmarks): Inception V3 142 images/s,
//   VGG-16 154 images/s; ResNet-101 is not in that table: 128 images/s, between ResNet-50's 219
//   and ResNet-152's 91.8 in proportion to the FLOPs (4.1, 7.8 and 11.3 GFLOPs per image);
// - backward twice the forward (the usual 1:2), 5 ms of optimizer, 2 % spread between GPUs;
// - parameters: Inception V3 23.8 M, ResNet-101 44.5 M, VGG-16 138.4 M (the models' papers), fp32
//   gradients;
// - inside a server PCIe, 10 GB/s; latencies 5 us inside, 10 us between servers.
//
// PyTorch DDP's own published scaling (pytorch/pytorch benchmarks/distributed/ddp/README.md, PyTorch
// 1.4, NCCL): torchvision models, batch 32 per GPU, DGX-1 servers of 8 V100 GPUs joined by 4 x 100
// Gbit/s InfiniBand each, bucket_cap_mb 25; p50 seconds per iteration of one GPU under DDP and of
// 16 GPUs on 2 servers: ResNet-50 0.100 / 0.104 s (96 %), ResNet-101 0.171 / 0.179 s (96 %),
// ResNeXt-50 32x4d 0.147 / 0.157 s (94 %), ResNeXt-101 32x8d 0.425 / 0.450 s (94 %). The baseline
// is the README's one-GPU DDP row: the simulator models communication, not DDP's bookkeeping per
// step, which that row already holds (3-6 % over its no-DDP row: 0.097, 0.162, 0.145, 0.415 s).
// Its paper (Li et al., VLDB 2020) shows 256 GPUs as curves only, without figures to set beside.
// Inputs beyond the README's: parameters 25.6 M, 44.5 M, 25.0 M, 88.8 M (torchvision); the
// backward/forward split, optimizer and spread as above; NVLink inside a DGX-1 100 GB/s (assumed),
// 50 GB/s between servers (the four links); DDP's buckets, the first 1 MB.
#include "published.h"

#include "engine/engine.h"
#include "report.h"

namespace cohort::sim {
namespace {

Params horovod_setup(int nodes, double params, double images_per_s) {
  Params p;
  p.nodes = nodes;
  p.workers_per_node = 4;
  p.params = params;
  p.batch_per_worker = 64;
  const double compute = 64.0 / images_per_s;
  p.data_s = 0;
  p.optimizer_s = 0.005;
  p.forward_s = (compute - p.optimizer_s) / 3;
  p.backward_s = 2 * p.forward_s;
  p.compute_cv = 0.02;
  p.algorithm = Algorithm::ring;
  p.bucket_mb = p.first_bucket_mb = 64;  // Tensor Fusion: one 64 MB buffer, no small first one
  p.inter_bw = 25e9 / 8;
  p.intra_bw = 10e9;
  p.inter_latency_s = 10e-6;
  p.intra_latency_s = 5e-6;
  p.node_mtbf_h = 0;  // a benchmark: no failures, no checkpoints
  p.checkpoint_every = 0;
  p.timeline_workers = 0;
  p.hours = 0.05;
  return p;
}

Params ddp_setup(double params, double step_s) {
  Params p = horovod_setup(2, params, 64.0 / step_s);  // its step: 64 images at 64 / step_s a second
  p.workers_per_node = 8;
  p.batch_per_worker = 32;
  p.bucket_mb = 25;  // DDP's defaults: bucket_cap_mb, and a first bucket of 1 MB
  p.first_bucket_mb = 1;
  p.inter_bw = 4 * 100e9 / 8;
  p.intra_bw = 100e9;
  return p;
}

}  // namespace

const std::vector<PublishedFigure>& published_figures() {
  static const char* kHorovod = "Horovod (arXiv:1802.05799; horovod docs/benchmarks.rst)";
  static const char* kDdp = "PyTorch DDP (pytorch/pytorch benchmarks/distributed/ddp/README.md)";
  static const std::vector<PublishedFigure> figures = {
      {kHorovod, "Inception V3", 32, 4, 0.90, horovod_setup(32, 23.8e6, 142)},
      {kHorovod, "ResNet-101", 32, 4, 0.90, horovod_setup(32, 44.5e6, 128)},
      {kHorovod, "VGG-16", 32, 4, 0.79, horovod_setup(32, 138.4e6, 154)},
      {kHorovod, "Inception V3", 128, 4, 0.90, horovod_setup(128, 23.8e6, 142)},
      {kHorovod, "ResNet-101", 128, 4, 0.90, horovod_setup(128, 44.5e6, 128)},
      {kHorovod, "VGG-16", 128, 4, 0.68, horovod_setup(128, 138.4e6, 154)},
      {kDdp, "ResNet-50", 2, 8, 0.100 / 0.104, ddp_setup(25.6e6, 0.100)},
      {kDdp, "ResNet-101", 2, 8, 0.171 / 0.179, ddp_setup(44.5e6, 0.171)},
      {kDdp, "ResNeXt-50", 2, 8, 0.147 / 0.157, ddp_setup(25.0e6, 0.147)},
      {kDdp, "ResNeXt-101", 2, 8, 0.425 / 0.450, ddp_setup(88.8e6, 0.425)},
  };
  return figures;
}

double simulated_efficiency(const Params& p) {
  Simulation s(p);
  s.run();
  return scaling_efficiency(s);
}

}  // namespace cohort::sim
