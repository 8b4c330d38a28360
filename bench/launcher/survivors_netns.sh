#!/usr/bin/env bash
# Survivors keep running on two machines (issue 19): from a worker's SIGKILL to the first completed
# training step, and the steps each recovery went back, with two "nodes" (network namespaces
# on one switch, bench/netns_star.sh) of two ranks each, the CNN on Fashion-MNIST, in-memory
# snapshots every step and warm spares. Two ways, alternating runs: every worker restarts
# (--warm-spares) against only the killed one replaced (--keep-survivors). Each run kills KILLS
# workers, on node 1 and node 0 in turn, a random local rank, 0.5-1.5 s after the job trains again
# (rank 0 printed its first step; the first kill WARMUP_S, default 4, later still, so that the warm
# spares have loaded). Prints every recovery, then each way's median.
# Usage: bench/launcher/survivors_netns.sh [KILLS per run (default 6)] [RUNS per way (default 2)]
# Needs root, iproute2 and a build (bash scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
kills=${1:-6}
runs=${2:-2}
build=${COHORT_BUILD:-build}
cohort=$(realpath "$build/tools/cohort")
example=$(realpath "$build/examples/fashion_mnist/fashion_mnist")
[ -x "$cohort" ] && [ -x "$example" ] || { echo "survivors_netns: build first (bash scripts/setup.sh)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "survivors_netns: needs root (network namespaces)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_survivors_bench.XXXXXX)
sw=cbs$$ a=cbs$$_0 b=cbs$$_1
cleanup() {
  pkill -9 -f "$work" 2>/dev/null || true
  for ns in $a $b $sw; do ip netns del $ns 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
# The two nodes at 10.81.0.1 and .2 on one switch; links at 10 Gbit/s (not the limit here).
. bench/netns_star.sh
netns_star "$sw" "cbs$$_" "cbv$$_" 10.81.0 2 10gbit
export COHORT_JOB_TOKEN=cohort-bench-job-token-0123456789abcdef

now_ns() { date +%s%N; }
first_steps() { grep -c first_step_unix_ns "$1" 2>/dev/null || true; }

# run WAY N: one job, KILLS kills; appends "way seconds steps_lost" lines to $work/results.
run() {
  local way=$1 n=$2 dir=$work/$1-$2 flags=(--warm-spares)
  [ "$way" = survive ] && flags+=(--keep-survivors)
  mkdir -p "$dir"
  for node in 1 0; do
    local ns=$b; [ $node = 0 ] && ns=$a
    ip netns exec $ns "$cohort" run --nnodes 2 --node-rank $node --nproc-per-node 2 --master-addr 10.81.0.1 \
      --master-port 29800 --rdzv-timeout 60 --threads-per-proc 1 --max-restarts 100 --no-dashboard "${flags[@]}" \
      --run-dir "$dir/run$node" -- "$example" --ckpt-dir "$dir/ck$node" --snapshot-every 1 --no-eval --threads 1 \
      --log-every 0 --max-steps 100000 --report-first-step >"$dir/node$node.log" 2>&1 &
  done
  local kill_ns=() k
  for ((k = 0; k < kills; k++)); do
    while [ "$(first_steps "$dir/node0.log")" -le "$k" ]; do sleep 0.05; done
    # The first kill once the warm spares had time to load (they start when the job trains).
    [ "$k" = 0 ] && sleep "${WARMUP_S:-4}"
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + r / 32767 }')"
    local node=$((1 - k % 2)) victim="" p
    for p in $(pgrep -f "^$example --ckpt-dir $dir/ck$node "); do
      # a training worker (it mapped a shared-memory segment), not a warm spare; either local rank
      grep -q "/dev/shm/cohort-[0-9]*-[0-9]" "/proc/$p/maps" 2>/dev/null && victim=$p && [ $((RANDOM % 2)) = 0 ] && break
    done
    [ -n "$victim" ] || { echo "survivors_netns: no training worker on node $node" >&2; exit 1; }
    kill_ns+=("$(now_ns)")
    kill -9 "$victim"
  done
  while [ "$(first_steps "$dir/node0.log")" -le "$kills" ]; do sleep 0.05; done
  pkill -f "run-dir $dir/run" 2>/dev/null || true  # the agents; their workers die with them
  wait 2>/dev/null || true
  # The first step after each kill (rank 0 prints one per start of its loop), and the steps lost.
  mapfile -t firsts < <(grep -o 'first_step_unix_ns [0-9]*' "$dir/node0.log" | awk '{print $2}' | tail -n +2)
  mapfile -t lost < <(grep -h '"kind":"recovered"' "$dir/run0/events.jsonl" | grep -o '"steps_lost":[0-9]*' | cut -d: -f2)
  for ((k = 0; k < kills; k++)); do
    awk -v w="$way" -v a="${kill_ns[$k]}" -v b="${firsts[$k]}" -v l="${lost[$k]:-?}" \
      'BEGIN { printf "%s %.3f %s\n", w, (b - a) / 1e9, l }' >>"$work/results"
  done
}

for ((n = 0; n < runs; n++)); do
  run restart $n
  run survive $n
done
echo "way seconds_from_kill_to_first_step steps_lost"
cat "$work/results"
for way in restart survive; do
  awk -v w=$way '$1 == w { print $2 }' "$work/results" | sort -n | awk -v w=$way '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s: median %.3f s over %d kills\n", w, m, NR }'
done
