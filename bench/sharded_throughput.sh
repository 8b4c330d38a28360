#!/usr/bin/env bash
# Sharded data parallel throughput, side by side (issue 7): DDP and the three levels of cohort's
# ShardedDataParallel (with each reduce-scatter and allgather implementation), and PyTorch's Python
# ZeroRedundancyOptimizer (ZeRO-1) + DDP on the same libtorch and Gloo, all on the same deep MLP at
# 2 ranks, one intra-op thread each. Prints samples/s, bytes moved per step and rank, and ratios.
#   usage: bench/sharded_throughput.sh [build dir] [repeats]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
repeats=${2:-3}
bin=$build/examples/sharded_mlp/sharded_mlp
ranks=$root/examples/sharded_mlp/run_ranks.sh
shape=(--layers 8 --width 1024 --batch 32 --steps 10 --warmup 3 --threads 1)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
run() {  # label, command...: best of $repeats, rank 0's line
  local label=$1; shift
  # Two ranks share the pipe and an unbuffered Python may split a line's text and its newline, so
  # the objects are decoded one after another rather than line by line.
  for ((i = 0; i < repeats; i++)); do "$ranks" 2 "$@" 2>/dev/null | python3 -c "
import sys, json
text, rows, dec, at = sys.stdin.read(), [], json.JSONDecoder(), 0
while (at := text.find('{', at)) >= 0:
    try:
        obj, end = dec.raw_decode(text, at)
        rows.append(obj); at = end
    except ValueError:
        at += 1
r = [x for x in rows if x['rank'] == 0][0]
print(json.dumps({'label': '$label', 'samples_per_s': r['samples_per_s'], 'bytes_per_step': r.get('bytes_per_step', {})}))"
  done
}
{
  run ddp "$bin" --mode ddp "${shape[@]}"
  run zero1 "$bin" --mode zero1 "${shape[@]}"
  run zero2 "$bin" --mode zero2 "${shape[@]}"
  run zero3 "$bin" --mode zero3 "${shape[@]}"
  run zero3_ring_gloo-allgather env COHORT_SHM=0 "$bin" --mode zero3 --reduce-scatter ring --allgather backend "${shape[@]}"
  run zero3_allreduce-slice_gloo env COHORT_SHM=0 "$bin" --mode zero3 --reduce-scatter allreduce_slice --allgather backend "${shape[@]}"
  run zero3_ring_shm-allgather "$bin" --mode zero3 --reduce-scatter ring --allgather shm_allreduce "${shape[@]}"
  run python_zero1 /usr/bin/python3 "$root/bench/peer_zero.py" --mode zero1 "${shape[@]}"
  run python_ddp /usr/bin/python3 "$root/bench/peer_zero.py" --mode ddp "${shape[@]}"
} | python3 -c "
import sys, json
best = {}
for l in sys.stdin:
    r = json.loads(l)
    if r['label'] not in best or r['samples_per_s'] > best[r['label']]['samples_per_s']: best[r['label']] = r
ddp = best['ddp']['samples_per_s']
print('%-28s %12s %8s %s' % ('run', 'samples/s', 'vs DDP', 'MB moved per step and rank (full-unit bytes)'))
for k, r in best.items():
    mb = {b: round(v / 2**20, 1) for b, v in r['bytes_per_step'].items()}
    print('%-28s %12.1f %8.2f %s' % (k, r['samples_per_s'], r['samples_per_s'] / ddp, mb))
print('zero1 / python ZeroRedundancyOptimizer: %.2f' % (best['zero1']['samples_per_s'] / best['python_zero1']['samples_per_s']))
"
