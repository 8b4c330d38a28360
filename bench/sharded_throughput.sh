#!/usr/bin/env bash
# Sharded data parallel throughput, side by side (issue 7): DDP and the three levels of cohort's
# ShardedDataParallel (with each reduce-scatter and allgather implementation; with cohort::FusedAdam,
# the example's default, and with libtorch's Adam), and PyTorch's Python ZeroRedundancyOptimizer
# (ZeRO-1) + DDP on the same libtorch and Gloo (with torch.optim.Adam's plain and foreach=True
# implementations), all on the same deep MLP at 2 ranks, one intra-op thread each. Prints samples/s,
# bytes moved per step and rank, and ratios; level 1 is compared with the faster Python peer.
# The configurations run round-robin, `repeats` rounds, best of each: load that comes and goes
# hits all of them alike instead of whichever ran at that moment.
# With PyTorch 2.x as the peer (PEER_PYTHON: a Python whose torch is 2.x, e.g. the torch 2.x build's
# venv, with cohort built against the same libtorch: scripts/build-torch2.sh), FSDP2 (`fully_shard`)
# runs too, the level-3 peer; peak memory per rank (state_mb, measured the same way on both sides:
# peak RSS minus RSS after joining) is printed beside each row.
#   usage: [ONLY="ddp zero1 ..."] [COHORT_BUILD=build] [PEER_PYTHON=...] bench/sharded_throughput.sh [build dir] [repeats]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${COHORT_BUILD:-build}}
case $build in /*) ;; *) build=$root/$build ;; esac
repeats=${2:-3}
bin=$build/examples/sharded_mlp/sharded_mlp
ranks=$root/examples/sharded_mlp/run_ranks.sh
peer=$root/bench/peer_zero.py
py=${PEER_PYTHON:-/usr/bin/python3}
fsdp2=$("$py" -c 'import torch; print(int(torch.__version__.split(".")[0]) >= 2)')
shape=(--layers 8 --width 1024 --batch 32 --steps 30 --warmup 3 --threads 1)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
idle_percent() {  # the CPUs' idle share over one second, from /proc/stat
  local a b c d e f g h t1 i1
  read -r _ a b c d e f g h _ < /proc/stat; t1=$((a + b + c + d + e + f + g + h)); i1=$((d + e))
  sleep 1
  read -r _ a b c d e f g h _ < /proc/stat
  echo $((100 * (d + e - i1) / (a + b + c + d + e + f + g + h - t1)))
}
wait_quiet() {  # the machine is shared: start a run only once the CPUs are >= 90% idle (2 min at most)
  for ((w = 0; w < 120; w++)); do [ "$(idle_percent)" -ge 90 ] && return; done
  echo "warning: started a run on a busy machine" >&2
}
run() {  # label, command...: one run, rank 0's line (ONLY="label ...": only those configurations)
  local label=$1; shift
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $label "* ]] || return 0
  wait_quiet
  # Two ranks share the pipe and an unbuffered Python may split a line's text and its newline, so
  # the objects are decoded one after another rather than line by line.
  "$ranks" 2 "$@" 2>/dev/null | python3 -c "
import sys, json
text, rows, dec, at = sys.stdin.read(), [], json.JSONDecoder(), 0
while (at := text.find('{', at)) >= 0:
    try:
        obj, end = dec.raw_decode(text, at)
        rows.append(obj); at = end
    except ValueError:
        at += 1
r = [x for x in rows if x['rank'] == 0][0]
print(json.dumps({'label': '$label', 'samples_per_s': r['samples_per_s'], 'bytes_per_step': r.get('bytes_per_step', {}),
                  'state_mb': max(x.get('state_mb', 0) for x in rows)}))"
}
{
  for ((i = 0; i < repeats; i++)); do
    run ddp "$bin" --mode ddp "${shape[@]}"
    run zero1 "$bin" --mode zero1 "${shape[@]}"
    run python_zero1 "$py" "$peer" --mode zero1 "${shape[@]}"
    run python_zero1_foreach "$py" "$peer" --mode zero1 --foreach "${shape[@]}"
    run zero1_libtorch-adam "$bin" --mode zero1 --optimizer adam "${shape[@]}"
    run ddp_libtorch-adam "$bin" --mode ddp --optimizer adam "${shape[@]}"
    run zero1_shm-collectives "$bin" --mode zero1 --allgather shm --reduce-scatter shm "${shape[@]}"
    # The memory probe's fixed 256 KiB mmap threshold (every big temporary page-faulted each step);
    # the other rows run with glibc's adaptive threshold, as the Python peer does.
    run zero1_mmap-256k "$bin" --mode zero1 --mmap-threshold-kb 256 "${shape[@]}"
    run python_ddp "$py" "$peer" --mode ddp "${shape[@]}"
    run python_ddp_foreach "$py" "$peer" --mode ddp --foreach "${shape[@]}"
    run zero2 "$bin" --mode zero2 "${shape[@]}"
    run zero3 "$bin" --mode zero3 "${shape[@]}"
    [ "$fsdp2" = True ] && run python_fsdp2 "$py" "$peer" --mode fsdp2 "${shape[@]}"
    [ "$fsdp2" = True ] && run python_fsdp2_foreach "$py" "$peer" --mode fsdp2 --foreach "${shape[@]}"
    run zero3_shm-collectives "$bin" --mode zero3 --allgather shm --reduce-scatter shm "${shape[@]}"
    run zero3_ring_gloo-allgather env COHORT_SHM=0 "$bin" --mode zero3 --reduce-scatter ring --allgather backend "${shape[@]}"
  done
} | python3 -c "
import sys, json
best = {}
for l in sys.stdin:
    r = json.loads(l)
    if r['label'] not in best or r['samples_per_s'] > best[r['label']]['samples_per_s']: best[r['label']] = r
ddp = best['ddp']['samples_per_s']
print('%-32s %12s %8s %10s %s' % ('run', 'samples/s', 'vs DDP', 'peak MiB', 'MB moved per step and rank (full-unit bytes)'))
for k, r in best.items():
    mb = {b: round(v / 2**20, 1) for b, v in r['bytes_per_step'].items()}
    print('%-32s %12.1f %8.2f %10.0f %s' % (k, r['samples_per_s'], r['samples_per_s'] / ddp, r['state_mb'], mb))
s = lambda k: best[k]['samples_per_s']
peer = max(s('python_zero1'), s('python_zero1_foreach'))
print('faster Python ZeroRedundancyOptimizer: %s' % ('foreach' if s('python_zero1_foreach') > s('python_zero1') else 'plain'))
print('zero1 (FusedAdam) / Python ZeroRedundancyOptimizer: %.2f' % (s('zero1') / peer))
print('zero1 (libtorch Adam) / Python ZeroRedundancyOptimizer: %.2f' % (s('zero1_libtorch-adam') / peer))
print('zero1 / cohort DDP (both FusedAdam): %.2f' % (s('zero1') / ddp))
print('zero1 / cohort DDP (both libtorch Adam): %.2f' % (s('zero1_libtorch-adam') / s('ddp_libtorch-adam')))
if 'python_fsdp2' in best:
    f = max(['python_fsdp2', 'python_fsdp2_foreach'], key=s)
    print('zero3 / FSDP2 (faster: %s): %.2f samples/s; peak MiB per rank %.0f vs %.0f' % (f, s('zero3') / s(f), best['zero3']['state_mb'], best[f]['state_mb']))
"
