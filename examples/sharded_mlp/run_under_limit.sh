#!/usr/bin/env bash
# Trains a deep MLP (16 x Linear(2048, 2048): 67 M parameters; its Adam training state, 16 bytes a
# parameter, is 1.07 GB) on 4 ranks, each under an operating-system memory limit, twice:
#   1. ShardedDataParallel at level 3 (parameters sharded): fits, trains, prints its results;
#   2. plain DDP under the same limit: every rank stops with "rank R: out of memory ..." (exit 3).
# The limit is on each process's address space (prlimit --as, RLIMIT_AS): cgroup v2 memory.max
# would kill the process instead of failing its allocation, which is the silent kill this example
# is meant to avoid, and cgroups are often not writable in containers.
#   usage: run_under_limit.sh [path/to/sharded_mlp] [limit in MiB, default 2000]
# About 2000 MiB: libtorch, Gloo and the threads take ~1.4 GB of address space before the model;
# level 3 peaks at ~1.7 GB, DDP needs ~2.3 GB.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/examples/sharded_mlp/sharded_mlp}
limit_mb=${2:-2000}
args=(--layers 16 --width 2048 --batch 8 --steps 2 --warmup 1 --mmap-threshold-kb 256)
limit=$((limit_mb * 1024 * 1024))

echo "== level 3 (parameters sharded), 4 ranks, address space limited to ${limit_mb} MiB each"
"$here/run_ranks.sh" 4 prlimit --as=$limit -- "$bin" --mode zero3 "${args[@]}"
sharded=$?
echo "exit status $sharded"
echo "== plain DDP, 4 ranks, the same limit"
"$here/run_ranks.sh" 4 prlimit --as=$limit -- "$bin" --mode ddp "${args[@]}"
ddp=$?
echo "exit status $ddp"
if [ $sharded -eq 0 ] && [ $ddp -eq 3 ]; then
  echo "as expected: level 3 trains under the limit, DDP runs out of memory with a clear error"
  exit 0
fi
echo "unexpected: level 3 exit $sharded (want 0), DDP exit $ddp (want 3)"
exit 1
