"""The peer for bench/sharded_throughput.sh: PyTorch's ZeroRedundancyOptimizer (ZeRO-1) with
Python DDP, and on PyTorch 2.x FSDP2 (`fully_shard` on every Linear and on the whole model, the
level-3 peer), over Gloo, training the same deep MLP as examples/sharded_mlp on the same synthetic
batches shape. (PyTorch 1.13's FSDP needs CUDA: there levels 2 and 3 have no CPU peer.) Started once
per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; prints one JSON line per rank with
the example's field names, peak memory included (state_mb: peak RSS minus RSS after joining, as the
example measures it).
--foreach uses torch.optim.Adam(foreach=True) (the multi-tensor implementation: fewer, larger
kernels); the benchmark runs both and compares cohort with the faster.
"""
import argparse, json, os, time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=8)
p.add_argument("--width", type=int, default=1024)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--mode", default="zero1", choices=["zero1", "ddp", "fsdp2"])
p.add_argument("--foreach", action="store_true", help="torch.optim.Adam(foreach=True)")
a = p.parse_args()
torch.set_num_threads(a.threads)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def status_mb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


baseline_mb = status_mb("VmRSS")
torch.manual_seed(0)
layers = []
for _ in range(a.layers):
    layers += [nn.Linear(a.width, a.width), nn.ReLU()]
net = nn.Sequential(*layers, nn.Linear(a.width, 10), nn.LogSoftmax(1))
if a.mode == "fsdp2":
    from torch.distributed.fsdp import fully_shard

    for m in net:
        if isinstance(m, nn.Linear):
            fully_shard(m)
    model = fully_shard(net)
else:
    model = DDP(net)
if a.mode == "zero1":
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3, foreach=a.foreach)
else:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=a.foreach)
g = torch.Generator().manual_seed(1000 + rank)
x, y = torch.randn(a.batch, a.width, generator=g), torch.randint(0, 10, (a.batch,), generator=g)
for s in range(a.warmup + a.steps):
    if s == a.warmup:
        t0 = time.perf_counter()
    opt.zero_grad()
    loss = nn.functional.nll_loss(model(x), y)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
peak_mb = status_mb("VmHWM")
print(json.dumps({"mode": "python_" + a.mode, "foreach": a.foreach, "rank": rank, "world": world, "loss": loss.item(),
                  "samples_per_s": a.steps * a.batch * world / dt, "step_ms": 1000 * dt / a.steps,
                  "torch": torch.__version__, "baseline_mb": baseline_mb, "peak_mb": peak_mb,
                  "state_mb": peak_mb - baseline_mb}), flush=True)
dist.barrier()
