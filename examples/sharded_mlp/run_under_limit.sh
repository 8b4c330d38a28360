#!/usr/bin/env bash
# Trains a deep MLP (16 x Linear(2048, 2048): 67 M parameters; its Adam training state, 16 bytes a
# parameter, is 1.07 GB) on 4 ranks, each under an operating-system memory limit, twice:
#   1. ShardedDataParallel at level 3 (parameters sharded): fits, trains, prints its results;
#   2. plain DDP under the same limit: every rank stops with "rank R: out of memory ..." (exit 3).
# The limit is on each process's address space (prlimit --as, RLIMIT_AS): cgroup v2 memory.max
# would kill the process instead of failing its allocation, which is the silent kill this example
# is meant to avoid, and cgroups are often not writable in containers.
#   usage: run_under_limit.sh [path/to/sharded_mlp] [limit in MiB]
# The default limit is the address space a rank of a tiny model reaches (libtorch, Gloo and the
# threads: ~1.3 GB with Debian's libtorch 1.13, ~3.1 GB with a CUDA libtorch 2.x, whose CUDA
# libraries are mapped too), measured first, plus 700 MiB: level 3 peaks ~330-400 MiB above it,
# DDP ~970-1150 MiB above it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/examples/sharded_mlp/sharded_mlp}
args=(--layers 16 --width 2048 --batch 8 --steps 2 --warmup 1 --mmap-threshold-kb 256)
if [ -n "${2:-}" ]; then
  limit_mb=$2
else
  base_mb=$("$here/run_ranks.sh" 4 "$bin" --mode zero3 --layers 1 --width 64 --batch 8 --steps 2 --warmup 1 --mmap-threshold-kb 256 |
            grep -o '"vm_peak_mb":[0-9.]*' | cut -d: -f2 | sort -n | tail -1)
  [ -n "$base_mb" ] || { echo "could not measure the address space of a tiny model's rank"; exit 1; }
  limit_mb=$(( ${base_mb%.*} + 700 ))
  echo "a tiny model's rank reaches ${base_mb%.*} MiB of address space; the limit is 700 MiB above it"
fi
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
