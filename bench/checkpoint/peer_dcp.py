"""The peer for bench/checkpoint/checkpoint_io.sh: torch.distributed.checkpoint (DCP) on the same state as
bench/checkpoint/checkpoint_io.cpp, world of one over Gloo.

State: parameters of --param-mb MiB in 64 MiB float tensors plus SGD momentum of the same size.
Each round, as the C++ side does:
  save     dcp.save (FileSystemWriter: its defaults, which fsync every file) of the model's and the
           optimizer's state dicts (torch.distributed.checkpoint.state_dict.get_state_dict)
  restore  dcp.load into a second model and optimizer, then set_state_dict; checked equal (with
           --cold-restore the page cache is dropped first, as root)
  async    dcp.async_save: the time the call blocks training (staging the state), then the
           future's result() for the rest
Prints one JSON line per round with the C++ side's field names (dd is run once, by the C++ side).
Needs PyTorch 2.x (async_save and get_state_dict); does not verify file hashes on load, which
cohort's restore does.
"""
import argparse, json, os, shutil, time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


class Big(torch.nn.Module):
    def __init__(self, mib, seed):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        per = 16 << 20  # 64 MiB of floats per tensor
        left, i = mib << 18, 0
        while left > 0:
            self.register_parameter(f"layer{i}", torch.nn.Parameter(torch.rand(min(per, left), generator=gen)))
            left -= per
            i += 1


def with_momentum(model):
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    sgd.step()  # creates every momentum buffer
    return sgd


def state_of(model, sgd):
    msd, osd = get_state_dict(model, sgd)
    return {"model": msd, "optim": osd}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/cohort_checkpoint_bench_dcp")
    p.add_argument("--param-mb", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cold-restore", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    model, restored = Big(a.param_mb, 1), Big(a.param_mb, 2)
    sgd, restored_sgd = with_momentum(model), with_momentum(restored)
    gib = 2.0 * a.param_mb / 1024
    for r in range(a.rounds):
        path = os.path.join(a.dir, f"step{3 * r + 1}")
        t = time.perf_counter()
        dcp.save(state_of(model, sgd), checkpoint_id=path)
        save_s = time.perf_counter() - t

        if a.cold_restore:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
        t = time.perf_counter()
        target = state_of(restored, restored_sgd)
        dcp.load(target, checkpoint_id=path)
        set_state_dict(restored, restored_sgd, model_state_dict=target["model"], optim_state_dict=target["optim"])
        restore_s = time.perf_counter() - t
        for x, y in zip(model.parameters(), restored.parameters()):
            if not torch.equal(x, y):
                raise SystemExit("peer_dcp: restored parameters differ")

        path = os.path.join(a.dir, f"step{3 * r + 2}")
        t = time.perf_counter()
        future = dcp.async_save(state_of(model, sgd), checkpoint_id=path)
        blocked_s = time.perf_counter() - t
        future.result()
        total_s = time.perf_counter() - t
        # Keep one checkpoint, as the C++ side does (keep_last = 1).
        shutil.rmtree(os.path.join(a.dir, f"step{3 * r + 1}"))
        if r > 0:
            shutil.rmtree(os.path.join(a.dir, f"step{3 * r - 1}"))
        print(json.dumps({"side": "dcp", "torch": torch.__version__, "round": r, "gib": gib, "save_s": save_s,
                          "restore_s": restore_s, "async_blocked_s": blocked_s, "async_total_s": total_s}), flush=True)
    shutil.rmtree(a.dir, ignore_errors=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
