"""The peer for bench/ddp_throughput.sh: PyTorch's Python DDP on the same libtorch and Gloo.

Trains the same models as examples/fashion_mnist (models.h) on Fashion-MNIST, the way a Python
user writes it: TensorDataset + DistributedSampler + DataLoader, DDP over Gloo, SGD with momentum.
Started once per rank with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (Debian's torchrun
fails under Python 3.11). Prints one JSON line per rank, with the example's field names.
--plain trains one process without torch.distributed (the scaling-efficiency baseline).
--comm-hook registers PyTorch's own DDP communication hook (fp16_compress_hook, bf16_compress_hook,
powerSGD_hook), the peers of cohort's hooks in bench/comm_netns.sh.
--local-sgd H trains without DDP and averages the parameters every H steps with PyTorch's
PeriodicModelAverager (what PostLocalSGDOptimizer does after its warm-up): the peer of cohort's
LocalSGD with outer=average.
"""
import argparse, gzip, json, os, struct, time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(3136, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), 1)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return F.log_softmax(self.fc3(x), 1)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape).copy())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plain", action="store_true")
    p.add_argument("--comm-hook", default="none", choices=["none", "fp16", "bf16", "powersgd"])
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--powersgd-start", type=int, default=10)
    p.add_argument("--local-sgd", type=int, default=0, help="average the parameters every H steps instead of DDP")
    p.add_argument("--no-eval", action="store_true", help="accepted for the example's flags; the peer never evaluates")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    distributed = not a.plain
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).long()
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=a.batch_size, sampler=sampler)

    model = Cnn() if a.model == "cnn" else Mlp()
    averager = None
    if distributed and a.local_sgd > 0:
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        for t in list(model.parameters()) + list(model.buffers()):  # rank 0's values, as DDP does
            dist.broadcast(t.data, 0)
        averager = PeriodicModelAverager(period=a.local_sgd, warmup_steps=0)
    elif distributed:
        model = nn.parallel.DistributedDataParallel(model)
        if a.comm_hook != "none":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd
            if a.comm_hook == "powersgd":
                state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                           start_powerSGD_iter=max(2, a.powersgd_start))
                model.register_comm_hook(state, psgd.powerSGD_hook)
            else:
                hook = default_hooks.fp16_compress_hook if a.comm_hook == "fp16" else default_hooks.bf16_compress_hook
                model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    step, start, loss = 0, None, None
    epoch = 0
    while step < a.max_steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            if averager:
                averager.average_parameters(model.parameters())
            step += 1
            if step == a.warmup_steps:
                start = time.perf_counter()
            if step >= a.max_steps:
                break
        epoch += 1
    elapsed = time.perf_counter() - start
    timed = step - a.warmup_steps
    print(json.dumps({"rank": rank, "world_size": world, "model": a.model, "steps": step,
                      "final_loss": loss.item(), "samples_per_s": timed * a.batch_size * world / elapsed,
                      "peer": "pytorch-ddp" if distributed else "pytorch-plain", "comm_hook": a.comm_hook, "local_sgd": a.local_sgd}), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
