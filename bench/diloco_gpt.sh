#!/usr/bin/env bash
# DiLoCo and DDP's comm hooks against plain DDP on the GPT example over a slow link (issue 18):
# NODES "machines" (default 2) as network namespaces (bench/netns_star.sh, every link shaped to
# RATE), 2 ranks per node, the tiny preset. Side by side, ROUNDS rounds interleaved, each variant of
# VARIANTS (default "ddp diloco"): `ddp` (gradients allreduced every step), `ddp:HOOK` (HOOK one of
# fp16, bf16, powersgd: --comm-hook, PowerSGD rank 4 from step 10) and `diloco` (`--mode diloco
# --sync-every H`: parameters synchronised every H steps, Nesterov outer step); the same steps,
# batch and data, so the same tokens. Prints tokens/s and the final validation loss of each
# (median of rounds) and their ratios to plain DDP's.
# Timing, so a benchmark: run it on an otherwise idle machine. Needs root and iproute2.
# The addresses (10.79.2.0/24) exist only inside the namespaces this script creates and removes.
#   usage: [COHORT_BUILD=build] [RATE=100mbit] [H=20] [NODES=2] [VARIANTS="ddp ddp:fp16 ddp:powersgd diloco"]
#          bench/diloco_gpt.sh [ROUNDS (1)] [STEPS (200)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
steps=${2:-200}
rate=${RATE:-100mbit}
every=${H:-20}
nodes=${NODES:-2}
variants=${VARIANTS:-ddp diloco}
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
  for i in $(seq 0 $((nodes - 1))); do ip netns del "cohort_g${id}_$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

. bench/netns_star.sh
netns_star "$sw" "cohort_g${id}_" "cg${id}_" 10.79.2 "$nodes" "$rate"

port=29800
# job OUT ARGS...: the GPT example on every node, 2 ranks each; rank 0's JSON in OUT.
job() {
  local out=$1 pids=() i
  shift
  port=$((port + 1))
  for i in $(seq 0 $((nodes - 1))); do
    ip netns exec "cohort_g${id}_$i" "$cli" run --nnodes "$nodes" --node-rank "$i" --nproc-per-node 2 --no-dashboard \
      --master-addr 10.79.2.1 --master-port "$port" --rdzv-timeout 60 -- "$gpt" --preset tiny --seq-len 64 \
      --threads 1 --steps "$steps" --batch 8 --eval-windows 64 --sample-tokens 0 --log-every 0 --timing-warmup 5 "$@" \
      >"$out.node$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { cat "$out.node$i" >&2; exit 1; }; done
  grep -h '"rank":0' "$out.node0" | tail -1 | sed 's/^\[[0-9]*\] //' >"$out"
}
case " $variants " in *" ddp "*) ;; *) variants="ddp $variants" ;; esac  # the yardstick
for r in $(seq "$rounds"); do
  for v in $variants; do
    case $v in
      ddp) job "$work/$v-$r.json" --mode ddp ;;
      ddp:*) job "$work/$v-$r.json" --mode ddp --comm-hook "${v#ddp:}" --powersgd-rank 4 --powersgd-start 10 ;;
      diloco) job "$work/$v-$r.json" --mode diloco --sync-every "$every" ;;
      *) echo "diloco_gpt: unknown variant '$v' (ddp, ddp:fp16, ddp:bf16, ddp:powersgd, diloco)" >&2; exit 2 ;;
    esac
  done
done
python3 - "$work" "$rate" "$rounds" "$every" "$steps" "$nodes" $variants <<'PY'
import json, statistics, sys, os
work, rate, rounds, every, steps, nodes, variants = *sys.argv[1:3], int(sys.argv[3]), *sys.argv[4:7], sys.argv[7:]
def med(v, key):
    return statistics.median(json.load(open(os.path.join(work, f"{v}-{r}.json")))[key] for r in range(1, rounds + 1))
print(f"GPT tiny, link {rate}, {nodes} nodes x 2 ranks, {steps} steps, median of {rounds} round(s)")
print(f"{'variant':16} {'tokens/s':>10} {'vs ddp':>7} {'val_loss':>9} {'vs ddp':>8}")
for v in variants:
    name = f"diloco H={every}" if v == "diloco" else v
    t, l = med(v, 'tokens_per_s'), med(v, 'val_loss')
    print(f"{name:16} {t:10.0f} {t / med('ddp', 'tokens_per_s'):6.2f}x {l:9.4f} {100 * (l / med('ddp', 'val_loss') - 1):+7.1f}%")
PY
