#!/usr/bin/env bash
# DDP communication hooks on a slow link (issue 18): 2 "machines" as network namespaces joined by
# veth pairs to a bridge in a switch namespace, every link shaped with tc to RATE both ways (tbf;
# this kernel has no netem, so no added delay), 2 ranks per node. Side by side, ROUNDS rounds
# interleaved: cohort (`cohort run --nnodes 2`, or NODES) with the flat fp32 allreduce, the hierarchical one,
# the fp16, bf16 and PowerSGD (rank 4) hooks over the flat allreduce, and PowerSGD over the
# hierarchical one; local SGD and DiLoCo (variants local:H and diloco:H: parameters synchronised
# every H steps, averaged or through the Nesterov outer step); PyTorch's Python DDP with its own
# hooks, and its PeriodicModelAverager for local:H, on the same libtorch, namespaces and links
# (bench/peer_ddp.py, Debian's torch 1.13: no bf16 over Gloo there). Prints samples/s per
# variant (median of rounds), each one's ratio to its own side's flat fp32 run, and the final loss
# (median of rounds).
# Timing, so a benchmark: run it on an otherwise idle machine. Needs root and iproute2.
# The addresses (10.79.1.0/24) exist only inside the namespaces this script creates and removes.
# NODES=3 (or more) starts that many nodes of 2 ranks each.
#   usage: [COHORT_BUILD=build] [RATE=100mbit] [NODES=2] [MODELS="mlp cnn"] [VARIANTS="none:flat fp16:flat ..."]
#          [PEER_TIMEOUT=240] [PEER_PYTHON=/usr/bin/python3 (or a venv with PyTorch 2.x)] bench/comm_netns.sh [ROUNDS (1)] [STEPS (30)]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1}
steps=${2:-30}
rate=${RATE:-100mbit}
nodes=${NODES:-2}
models=${MODELS:-mlp cnn}
build=${COHORT_BUILD:-build}
cli=$(realpath "$build/tools/cohort")
# The nodes of one job share its token (docs/security.md); `ip netns exec` passes the environment on.
export COHORT_JOB_TOKEN=${COHORT_JOB_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
example=$(realpath "$build/examples/fashion_mnist/fashion_mnist")
peer=$(realpath bench/peer_ddp.py)
[ -x "$cli" ] && [ -x "$example" ] || { echo "comm_netns: build first (bash scripts/setup.sh)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "comm_netns: needs root (ip netns)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_comm_netns.XXXXXX)
id=$$
sw=cohort_cw$id
cleanup() {
  pkill -9 -f "$work" 2>/dev/null || true
  pkill -9 -f "$peer" 2>/dev/null || true
  for i in $(seq 0 $((nodes - 1))); do ip netns del "cohort_c${id}_$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

. bench/netns_star.sh
netns_star "$sw" "cohort_c${id}_" "cc${id}_" 10.79.1 "$nodes" "$rate"

port=29700
common=(--max-steps "$steps" --warmup-steps 10 --no-eval)
# cohort_job MODEL HOOK ALLREDUCE OUT: cohort's example on both nodes, 2 ranks each; rank 0's JSON in OUT.
# HOOK local or diloco: ALLREDUCE is local SGD's H.
cohort_job() {
  local model=$1 hook=$2 algo=$3 out=$4 pids=() i mode
  case $hook in
    local) mode=(--local-sgd "$algo" --outer average) ;;
    diloco) mode=(--local-sgd "$algo" --outer nesterov) ;;
    *) mode=(--comm-hook "$hook" --allreduce "$algo" --powersgd-rank 4 --powersgd-start 10) ;;
  esac
  port=$((port + 1))
  for i in $(seq 0 $((nodes - 1))); do
    ip netns exec "cohort_c${id}_$i" "$cli" run --nnodes "$nodes" --node-rank "$i" --nproc-per-node 2 --no-dashboard \
      --master-addr 10.79.1.1 --master-port "$port" --rdzv-timeout 60 -- "$example" --model "$model" \
      "${mode[@]}" "${common[@]}" >"$out.node$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { cat "$out.node$i" >&2; exit 1; }; done
  grep -h '"rank":0' "$out.node0" | tail -1 | sed 's/^\[[0-9]*\] //' >"$out"
}
# peer_job MODEL HOOK OUT [H]: PyTorch's DDP, the same layout, started by hand (Debian's torchrun
# fails); with H, no DDP but parameters averaged every H steps.
peer_job() {
  local model=$1 hook=$2 out=$3 every=${4:-0} pids=() node local_rank
  port=$((port + 1))
  for node in $(seq 0 $((nodes - 1))); do
    for local_rank in 0 1; do
      ip netns exec "cohort_c${id}_$node" env RANK=$((node * 2 + local_rank)) WORLD_SIZE=$((nodes * 2)) MASTER_ADDR=10.79.1.1 \
        MASTER_PORT="$port" GLOO_SOCKET_IFNAME="cc${id}_$node" OMP_NUM_THREADS=1 \
        timeout -s KILL "${PEER_TIMEOUT:-240}" "${PEER_PYTHON:-/usr/bin/python3}" "$peer" --model "$model" --comm-hook "$hook" --powersgd-rank 4 --powersgd-start 10 --local-sgd "$every" \
        --threads 1 "${common[@]}" >"$out.r$((node * 2 + local_rank))" 2>&1 &
      pids+=($!)
    done
  done
  # A peer that does not finish in PEER_TIMEOUT seconds is reported and skipped (Debian's torch
  # 1.13 powerSGD_hook over Gloo hung here with no progress).
  local ok=1
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || ok=0; done
  if [ "$ok" = 1 ]; then
    grep -h '"rank": 0' "$out.r0" | tail -1 >"$out"
  else
    echo "comm_netns: PyTorch's $model --comm-hook $hook failed or hung (over ${PEER_TIMEOUT:-240} s); skipped" >&2
  fi
}
variants=${VARIANTS:-none:flat none:hierarchical fp16:flat bf16:flat powersgd:flat powersgd:hierarchical}
for r in $(seq "$rounds"); do
  for model in $models; do
    for v in $variants; do
      cohort_job "$model" "${v%%:*}" "${v##*:}" "$work/cohort-$model-$v-$r.json"
      case $v in
        none:flat | fp16:flat | powersgd:flat) peer_job "$model" "${v%%:*}" "$work/peer-$model-$v-$r.json" ;;
        local:*) peer_job "$model" none "$work/peer-$model-$v-$r.json" "${v##*:}" ;;
      esac
    done
  done
done
python3 - "$work" "$rate" "$rounds" "$nodes" "$variants" $models <<'PY'
import json, statistics, sys, glob, os
work, rate, rounds, nodes, variants, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5].split(), sys.argv[6:]
def median(side, model, hook, key):
    vals = []
    for r in range(1, rounds + 1):
        path = os.path.join(work, f"{side}-{model}-{hook}-{r}.json")
        if os.path.exists(path) and os.path.getsize(path):
            vals.append(json.load(open(path))[key])
    return statistics.median(vals) if vals else None
sps = lambda side, model, hook: median(side, model, hook, "samples_per_s")
print(f"link {rate}, {nodes} nodes x 2 ranks, median of {rounds} round(s); samples/s (ratio to the same side's flat fp32)")
print(f"{'model':5} {'hook:allreduce':22} {'cohort':>16} {'pytorch':>16} {'cohort/pytorch':>15}  final loss (cohort, pytorch)")
for model in models:
    base = {side: sps(side, model, "none:flat") for side in ("cohort", "peer")}
    for v in variants:
        c, p = sps("cohort", model, v), sps("peer", model, v)
        if not c and not p:
            continue  # not run (VARIANTS)
        cell = lambda x, b: f"{x:8.1f} ({x / b:4.2f}x)" if x and b else f"{'-':>16}"
        ratio = f"{c / p:15.2f}" if c and p else f"{'-':>15}"
        loss = lambda side: f"{x:.5f}" if (x := median(side, model, v, "final_loss")) is not None else "-"
        print(f"{model:5} {v:22} {cell(c, base['cohort']):>16} {cell(p, base['peer']):>16} {ratio}  {loss('cohort')}, {loss('peer')}")
PY
