# The peer of bench/launcher/startup_probe.cpp for torchrun: join the process group (Gloo), barrier, print
# the wall-clock time, exit.
import time

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
print(f"joined {time.time_ns()}", flush=True)
dist.destroy_process_group()
