#!/usr/bin/env bash
# The calibrated simulator against runs across "machines" (issue 17): 2 and 3 nodes as network
# namespaces, each joined by a veth pair to a bridge in a switch namespace of its own, every link
# shaped with tc to RATE in both directions (tbf; this kernel has no netem, so no added delay).
# The Fashion-MNIST CNN, one rank per node, `cohort run --nnodes`; ROUNDS rounds of the 2- and the
# 3-node job, interleaved. A calibration fitted on the 2-node runs (its link: the inter-node
# bandwidth and latency) predicts the 3-node runs; printed against each size's median.
# THREADS (1): each worker's intra-op threads (--threads-per-proc). A real node has its cores to
# itself; here 3 namespace nodes at cohort run's default (every core, 2 threads each) put 6
# spinning OpenMP threads on 2 cores, which slows them beyond the cores' share the model gives
# (3 nodes ran 2.6x the 2-node step at 1 Gbit/s). THREADS=0 runs that default.
# Timing, so a benchmark: run it on an otherwise idle machine. Needs root and iproute2.
# The addresses (10.79.0.0/24) exist only inside the namespaces this script creates and removes.
#   usage: [COHORT_BUILD=build] [RATE=100mbit] [THREADS=1] bench/sim/sim_netns.sh [ROUNDS (3)] [STEPS (60)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
steps=${2:-60}
rate=${RATE:-100mbit}
build=${COHORT_BUILD:-build}
threads=(); [ "${THREADS:-1}" = 0 ] || threads=(--threads-per-proc "${THREADS:-1}")
cli=$(realpath "$build/tools/cohort")
# The nodes of one job share its token (docs/security.md); `ip netns exec` passes the environment on.
export COHORT_JOB_TOKEN=${COHORT_JOB_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
example=$(realpath "$build/examples/fashion_mnist/fashion_mnist")
[ -x "$cli" ] && [ -x "$example" ] || { echo "sim_netns: build first (bash scripts/setup.sh)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "sim_netns: needs root (ip netns)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_sim_netns.XXXXXX)
id=$$
sw=cohort_sw$id
cleanup() {
  pkill -9 -f "$work" 2>/dev/null || true
  for i in 0 1 2; do ip netns del "cohort_n${id}_$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# The star: n0..n2 at 10.79.0.1-3, a bridge in $sw; tbf at $rate on both ends of each veth.
. bench/netns_star.sh
netns_star "$sw" "cohort_n${id}_" "cn${id}_" 10.79.0 3 "$rate"

port=29600
# job NODES DIR: the CNN on NODES namespaces, one rank each; node 0's event log in DIR.
job() {
  local nodes=$1 dir=$2 pids=() i
  port=$((port + 1))
  for i in $(seq 0 $((nodes - 1))); do
    local log=(); [ "$i" = 0 ] && log=(--log-dir "$dir")
    ip netns exec "cohort_n${id}_$i" "$cli" run --nnodes "$nodes" --node-rank "$i" --nproc-per-node 1 "${threads[@]}" --no-dashboard \
      --master-addr 10.79.0.1 --master-port "$port" --rdzv-timeout 60 "${log[@]}" -- "$example" --max-steps "$steps" \
      --no-eval >"$dir.node$i.out" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { cat "$dir.node$i.out" >&2; exit 1; }; done
}
fit=(); all=()
for r in $(seq "$rounds"); do
  job 2 "$work/r$r-n2"
  job 3 "$work/r$r-n3"
  fit+=("$work/r$r-n2"); all+=("$work/r$r-n2" "$work/r$r-n3")
done
# The namespaces share this machine's cores: --shared-machine gives each node its share of them.
"$cli" sim calibrate --shared-machine "${fit[@]}" -o "$work/calibration.json" 2>/dev/null
"$cli" sim predict --json --tolerance 1e9 --calibration "$work/calibration.json" "${all[@]}" >"$work/predicted.json"
python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["params"]
print("link %s: fitted inter-node bandwidth %.1f Mbit/s, latency %.3f ms; gradients %.2f MB"
      % (sys.argv[2], p["inter_bw"] * 8 / 1e6, p["inter_latency_s"] * 1e3, p["params"] * 4 / 1e6))' \
  "$work/calibration.json" "$rate"
python3 bench/sim/sim_compare.py "$work/predicted.json" nodes nodes 2
