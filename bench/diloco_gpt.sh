#!/usr/bin/env bash
# DiLoCo against DDP on the GPT example over a slow link (issue 18): 2 "machines" as network
# namespaces (bench/netns_star.sh, every link shaped to RATE), 2 ranks per node, the tiny preset.
# Side by side, ROUNDS rounds interleaved: `--mode ddp` (gradients allreduced every step) and
# `--mode diloco --sync-every H` (parameters synchronised every H steps, Nesterov outer step), the
# same steps, batch and data, so the same tokens. Prints tokens/s and the final validation loss of
# each (median of rounds) and DiLoCo's ratios to DDP.
# Timing, so a benchmark: run it on an otherwise idle machine. Needs root and iproute2.
# The addresses (10.79.2.0/24) exist only inside the namespaces this script creates and removes.
#   usage: [COHORT_BUILD=build] [RATE=100mbit] [H=20] bench/diloco_gpt.sh [ROUNDS (1)] [STEPS (200)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
steps=${2:-200}
rate=${RATE:-100mbit}
every=${H:-20}
build=${COHORT_BUILD:-build}
cli=$(realpath "$build/tools/cohort")
# The nodes of one job share its token (docs/security.md); `ip netns exec` passes the environment on.
export COHORT_JOB_TOKEN=${COHORT_JOB_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
gpt=$(realpath "$build/examples/gpt/gpt")
[ -x "$cli" ] && [ -x "$gpt" ] || { echo "diloco_gpt: build first (bash scripts/setup.sh)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "diloco_gpt: needs root (ip netns)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_diloco_gpt.XXXXXX)
id=$$
sw=cohort_gw$id
cleanup() {
  pkill -9 -f "$work" 2>/dev/null || true
  for i in 0 1; do ip netns del "cohort_g${id}_$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

. bench/netns_star.sh
netns_star "$sw" "cohort_g${id}_" "cg${id}_" 10.79.2 2 "$rate"

port=29800
# job OUT ARGS...: the GPT example on both nodes, 2 ranks each; rank 0's JSON in OUT.
job() {
  local out=$1 pids=() i
  shift
  port=$((port + 1))
  for i in 0 1; do
    ip netns exec "cohort_g${id}_$i" "$cli" run --nnodes 2 --node-rank "$i" --nproc-per-node 2 --no-dashboard \
      --master-addr 10.79.2.1 --master-port "$port" --rdzv-timeout 60 -- "$gpt" --preset tiny --seq-len 64 \
      --threads 1 --steps "$steps" --batch 8 --eval-windows 64 --sample-tokens 0 --log-every 0 --timing-warmup 5 "$@" \
      >"$out.node$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { cat "$out.node$i" >&2; exit 1; }; done
  grep -h '"rank":0' "$out.node0" | tail -1 | sed 's/^\[[0-9]*\] //' >"$out"
}
for r in $(seq "$rounds"); do
  job "$work/ddp-$r.json" --mode ddp
  job "$work/diloco-$r.json" --mode diloco --sync-every "$every"
done
python3 - "$work" "$rate" "$rounds" "$every" "$steps" <<'PY'
import json, statistics, sys, os
work, rate, rounds, every, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def med(mode, key):
    return statistics.median(json.load(open(os.path.join(work, f"{mode}-{r}.json")))[key] for r in range(1, rounds + 1))
print(f"GPT tiny, link {rate}, 2 nodes x 2 ranks, {steps} steps, median of {rounds} round(s)")
print(f"{'mode':16} {'tokens/s':>10} {'val_loss':>9}")
for mode, name in (("ddp", "ddp"), ("diloco", f"diloco H={every}")):
    print(f"{name:16} {med(mode, 'tokens_per_s'):10.0f} {med(mode, 'val_loss'):9.4f}")
print(f"diloco/ddp: tokens/s {med('diloco', 'tokens_per_s') / med('ddp', 'tokens_per_s'):.2f}x, "
      f"val_loss {100 * (med('diloco', 'val_loss') / med('ddp', 'val_loss') - 1):+.1f} %")
PY
