"""The peer for bench/gpt_throughput.sh: examples/gpt's model and training step in Python, with
PyTorch's DDP over Gloo on the same libtorch, as a PyTorch user writes it.

Same model (token + position embeddings, pre-norm blocks with scaled_dot_product_attention and a
tanh-GELU MLP, tied head; GPT-2 initialisation), the same byte tokens of the same corpus split the
same way (every 20th fortune held out), the same windows drawn by torch's DistributedSampler,
AdamW (betas 0.9/0.95, weight decay on matrices only, via parameter groups), a cosine schedule with
warm-up, gradient clipping at 1.0. Started once per rank with RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set; prints one JSON line per rank with the example's field names.

--device cuda (scripts/gpu-check.sh, a world of one): NCCL, bf16 autocast, the loss read back every
step after the optimizer's step is queued, as the example does (so both time the same synchronised
steps); --fused-adamw picks PyTorch's fused AdamW instead of its default (foreach) one.
"""
import argparse, json, math, os, time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

PRESETS = {"tiny": dict(vocab=256, positions=256, layers=4, heads=4, dim=256),
           "gpt2-124m": dict(vocab=50304, positions=1024, layers=12, heads=12, dim=768)}


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        self.heads = c["heads"]
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        for m, std in ((self.qkv, 0.02), (self.fc, 0.02), (self.proj, 0.02 / math.sqrt(2 * c["layers"])),
                       (self.out, 0.02 / math.sqrt(2 * c["layers"]))):
            nn.init.normal_(m.weight, 0.0, std)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c["vocab"], c["dim"]), nn.Embedding(c["positions"], c["dim"])
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["dim"])

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


def load_corpus(path):
    """The training split of examples/gpt's corpus (corpus.cpp): fortunes (records ending in a "%"
    line) of every regular file but the .dat indexes, every 20th held out."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path)
                       if not n.endswith(".dat") and os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
    else:
        files = [path]
    train, records = bytearray(), 0
    for f in files:
        lines = open(f, "rb").read().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        record = bytearray()
        for i, line in enumerate(lines):
            record += line + b"\n"
            if line == b"%" or i == len(lines) - 1:
                if records % 20 != 19:
                    train += record
                records += 1
                record = bytearray()
    return torch.frombuffer(bytes(train), dtype=torch.uint8)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="tiny")
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--layers", type=int, default=0)
    p.add_argument("--dim", type=int, default=0)
    p.add_argument("--corpus", default="/usr/share/games/fortunes")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--timing-warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--fused-adamw", action="store_true")
    p.add_argument("--phase-times", action="store_true",
                   help="time each phase of a step, synchronising the device (as the C++ example's flag)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = dict(PRESETS[a.preset])
    c.update({k: v for k, v in (("layers", a.layers), ("dim", a.dim)) if v})
    t = a.seq_len or c["positions"]
    cuda = a.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    tokens = load_corpus(a.corpus)
    windows = (tokens.numel() - 1) // t
    sampler = DistributedSampler(range(windows), num_replicas=world, rank=rank, shuffle=True, seed=0)
    model = DDP(Gpt(c).to(device), device_ids=[device.index] if cuda else None)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if a.fused_adamw else {}))
    warmup, min_lr = 20, a.lr / 10

    def lr_at(s):
        if s < warmup:
            return a.lr * (s + 1) / warmup
        return min_lr + 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, a.steps - warmup)))) * (a.lr - min_lr)

    step, timed, timed_s = 0, 0, 0.0
    phase_ms, last = {}, [0.0]

    def phase(name=None):  # name None: a step starts
        if not a.phase_times:
            return
        if cuda:
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        if name is not None and step >= a.timing_warmup:  # the steps the throughput counts
            phase_ms[name] = phase_ms.get(name, 0.0) + (now - last[0]) * 1000
        last[0] = now

    epoch = 0
    while step < a.steps:
        sampler.set_epoch(epoch)
        order = list(sampler)
        for at in range(0, len(order) - a.batch + 1, a.batch):
            t0 = time.perf_counter()
            phase()
            starts = torch.tensor(order[at:at + a.batch]) * t
            w = tokens[starts.unsqueeze(1) + torch.arange(t + 1)].long()
            x, y = w[:, :t].to(device), w[:, 1:].to(device)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            phase("to_device")
            with torch.autocast("cuda", torch.bfloat16, enabled=cuda):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.reshape(-1))
            phase("forward")
            loss.backward()
            phase("backward")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            phase("clip")
            opt.step()
            phase("optimizer")
            loss_value = loss.item()  # as the example reads it: once the optimizer is queued; every step ends synchronised
            step += 1
            if step > a.timing_warmup:
                timed += 1
                timed_s += time.perf_counter() - t0
            if step >= a.steps:
                break
        epoch += 1
    print(json.dumps({"peer": "python_ddp", "rank": rank, "world_size": world, "steps": step, "train_loss": loss_value,
                      "tokens_per_s": timed * a.batch * world * t / timed_s, "torch": torch.__version__,
                      "device": a.device, "fused_adamw": a.fused_adamw,
                      **({"phase_ms": {k: v / timed for k, v in phase_ms.items()}} if a.phase_times and timed else {})}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
