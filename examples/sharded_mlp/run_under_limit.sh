#!/usr/bin/env bash
# Trains a deep MLP (16 x Linear(2048, 2048): 67 M parameters; its Adam training state, 16 bytes a
# parameter, is 1.07 GB) on 4 ranks, each under an operating-system memory limit, twice:
#   1. ShardedDataParallel at level 3 (parameters sharded): fits, trains, prints its results;
#   2. plain DDP under the same limit: every rank stops with "rank R: out of memory ..." (exit 3),
#      or, waiting for a peer that ran out first, with that peer's death (exit 1).
# The limit is on each process's address space (prlimit --as, RLIMIT_AS): cgroup v2 memory.max
# would kill the process instead of failing its allocation, which is the silent kill this example
# is meant to avoid, and cgroups are often not writable in containers.
#   usage: run_under_limit.sh [path/to/sharded_mlp] [limit in MiB]
# The default limit is the address space a rank of a tiny model reaches (libtorch, Gloo and the
# threads: ~1.3 GB with Debian's libtorch 1.13, ~3.1 GB with a CUDA libtorch 2.x, whose CUDA
# libraries are mapped too), measured first, plus 700 MiB: level 3 peaks ~330-400 MiB above it,
# DDP ~970-1150 MiB above it. Each rank gets its own: rank 0, which also hosts the store, reaches
# ~70 MiB more than the others, and under one limit for all it alone runs out first, so the other
# ranks then report its death rather than running out of memory themselves.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/examples/sharded_mlp/sharded_mlp}
args=(--layers 16 --width 2048 --batch 8 --steps 2 --warmup 1 --mmap-threshold-kb 256)
if [ -n "${2:-}" ]; then
  limits_mb="$2 $2 $2 $2"
else
  # "<rank> <MiB>" per rank, in rank order.
  base=$("$here/run_ranks.sh" 4 "$bin" --mode zero3 --layers 1 --width 64 --batch 8 --steps 2 --warmup 1 --mmap-threshold-kb 256 |
         python3 -c 'import json, sys
rows = sorted((r["rank"], r["vm_peak_mb"]) for r in map(json.loads, (l for l in sys.stdin if l.startswith("{"))))
print(" ".join(str(int(v)) for _, v in rows) if len(rows) == 4 else "")')
  [ -n "$base" ] || { echo "could not measure the address space of a tiny model's ranks"; exit 1; }
  limits_mb=""
  for b in $base; do limits_mb="$limits_mb $((b + 700))"; done
  echo "a tiny model's ranks reach $base MiB of address space; each rank's limit is 700 MiB above its own"
fi
export LIMITS_MB="$limits_mb"
# This rank's limit (RANK comes from run_ranks.sh), then the command.
limited=(bash -c 'l=($LIMITS_MB); exec prlimit --as=$(( l[RANK] * 1024 * 1024 )) -- "$@"' limited)

echo "== level 3 (parameters sharded), 4 ranks, address space limited to$limits_mb MiB"
"$here/run_ranks.sh" 4 "${limited[@]}" "$bin" --mode zero3 "${args[@]}"
sharded=$?
echo "exit status $sharded"
echo "== plain DDP, 4 ranks, the same limits"
"$here/run_ranks.sh" 4 "${limited[@]}" "$bin" --mode ddp "${args[@]}"
ddp=$?
echo "exit status $ddp"
# DDP's status is the first failing rank's (run_ranks.sh): 3 where that rank ran out of memory
# itself, 1 where it reports the death of a peer that ran out first while it waited for it.
if [ $sharded -eq 0 ] && { [ $ddp -eq 3 ] || [ $ddp -eq 1 ]; }; then
  echo "as expected: level 3 trains under the limit, DDP runs out of memory with a clear error"
  exit 0
fi
echo "unexpected: level 3 exit $sharded (want 0), DDP exit $ddp (want 3, or 1 for a dead peer)"
exit 1
