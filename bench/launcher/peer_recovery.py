"""The peer for bench/launcher/recovery.sh: the Fashion-MNIST CNN in Python DDP under torchrun, resuming
from its own checkpoint after a restart — the way a Python user writes fault-tolerant training.

Checkpoints every --ckpt-every steps with torch.save to a temporary file and os.replace (atomic),
model + optimizer + step; on start it loads the newest and continues the epoch where it was. With
--dcp (PyTorch 2.x) every rank saves through torch.distributed.checkpoint instead, one directory
per step (DCP commits with its .metadata file), and a start loads the newest committed one.
Rank 0 prints "first_step_unix_ns <ns> step <n>" when the first step of this start completes (the
same line as examples/fashion_mnist --report-first-step), and a JSON line at the end.
"""
import argparse, json, os, sys, time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # bench/peer_ddp.py
from peer_ddp import Cnn, read_idx  # noqa: E402


def dcp_save(model, opt, step, ckpt_dir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd, "step": torch.tensor(step)},
             checkpoint_id=os.path.join(ckpt_dir, f"step-{step:08d}"))


def dcp_load(model, opt, ckpt_dir):
    """The newest committed DCP checkpoint's step (0 when there is none), loaded into model and opt."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    done = sorted(d for d in os.listdir(ckpt_dir) if os.path.exists(os.path.join(ckpt_dir, d, ".metadata")))
    if not done:
        return 0
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=os.path.join(ckpt_dir, done[-1]))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["step"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dcp", action="store_true", help="torch.distributed.checkpoint (PyTorch 2.x)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    images = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    labels = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).long()
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    model = torch.nn.parallel.DistributedDataParallel(Cnn())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    path = os.path.join(a.ckpt_dir, "checkpoint.pt")
    step = 0
    if a.dcp:
        step = dcp_load(model, opt, a.ckpt_dir)
    elif os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    steps_per_epoch = len(sampler) // a.batch_size + (len(sampler) % a.batch_size > 0)
    first = True
    while step < a.max_steps:
        epoch, skip = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)
        indices = list(sampler)[skip * a.batch_size:]
        loader = DataLoader(torch.utils.data.Subset(dataset, indices), batch_size=a.batch_size)
        for x, y in loader:
            opt.zero_grad()
            F.nll_loss(model(x), y).backward()
            opt.step()
            step += 1
            if first and rank == 0:
                print(f"first_step_unix_ns {time.time_ns()} step {step}", flush=True)
            first = False
            if step % a.ckpt_every == 0 and a.dcp:
                dcp_save(model, opt, step, a.ckpt_dir)
            elif step % a.ckpt_every == 0 and rank == 0:
                tmp = path + ".tmp"
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, path)
            if step >= a.max_steps:
                break
    print(json.dumps({"rank": rank, "steps": step, "peer": "torchrun"}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
