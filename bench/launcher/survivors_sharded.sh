#!/usr/bin/env bash
# Survivors keep running under ShardedDataParallel (issue 19): the GPT example (a small preset,
# ZeRO-3 by default) on two ranks of this machine, in-memory snapshots every step, warm spares.
# Two ways, alternating runs: every worker restarts (--warm-spares) against only the killed one
# replaced (--keep-survivors). Each run kills KILLS workers, a random rank, 0.5-1.5 s after the
# job trains again (the first kill WARMUP_S, default 4 s, after the start, so that the warm spares
# have loaded). Per recovery, from the hub's event log (events.jsonl, `recovered`): seconds from
# the failure to the first completed step, and the steps it went back. Prints every recovery,
# then each way's median.
# Usage: bench/launcher/survivors_sharded.sh [KILLS per run (default 4)] [RUNS per way (default 2)] [MODE (zero3)]
set -euo pipefail
cd "$(dirname "$0")/../.."
kills=${1:-4}
runs=${2:-2}
mode=${3:-zero3}
build=${COHORT_BUILD:-build}
cohort=$(realpath "$build/tools/cohort")
gpt=$(realpath "$build/examples/gpt/gpt")
[ -x "$cohort" ] && [ -x "$gpt" ] || { echo "survivors_sharded: build first (bash scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_survivors_sharded.XXXXXX)
cleanup() {
  pkill -9 -f "$work" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

recoveries() { grep -c '"kind":"recovered"' "$1" 2>/dev/null || true; }

# run WAY N: one job, KILLS kills; appends "way seconds steps_lost" lines to $work/results.
run() {
  local way=$1 n=$2 dir=$work/$1-$2 flags=(--warm-spares)
  [ "$way" = survive ] && flags+=(--keep-survivors)
  mkdir -p "$dir"
  "$cohort" run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 100 --no-dashboard "${flags[@]}" \
    --run-dir "$dir/run" -- "$gpt" --ckpt-dir "$dir/ck" --snapshot-every 1 --preset tiny --seq-len 64 --layers 2 \
    --dim 128 --batch 4 --threads 1 --eval-windows 32 --sample-tokens 0 --steps 1000000 --log-every 0 \
    --mode "$mode" >"$dir/log" 2>&1 &
  local k p victim
  sleep "${WARMUP_S:-4}"
  for ((k = 0; k < kills; k++)); do
    while [ "$(recoveries "$dir/run/events.jsonl")" -lt "$k" ]; do sleep 0.05; done
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + r / 32767 }')"
    victim=""
    for p in $(pgrep -f "^$gpt --ckpt-dir $dir/ck "); do
      # a training worker (it mapped a shared-memory segment), not a warm spare; either rank
      grep -q "/dev/shm/cohort-[0-9]*-[0-9]" "/proc/$p/maps" 2>/dev/null && victim=$p && [ $((RANDOM % 2)) = 0 ] && break
    done
    [ -n "$victim" ] || { echo "survivors_sharded: no training worker" >&2; cat "$dir/log" >&2; exit 1; }
    kill -9 "$victim"
  done
  while [ "$(recoveries "$dir/run/events.jsonl")" -lt "$kills" ]; do sleep 0.05; done
  pkill -f "run-dir $dir/run" 2>/dev/null || true  # the agent; its workers die with it
  wait 2>/dev/null || true
  grep -h '"kind":"recovered"' "$dir/run/events.jsonl" | while read -r line; do
    local s l
    s=$(grep -o '"seconds":[0-9.e+-]*' <<<"$line" | cut -d: -f2)
    l=$(grep -o '"steps_lost":[0-9]*' <<<"$line" | cut -d: -f2)
    awk -v w="$way" -v s="$s" -v l="${l:-?}" 'BEGIN { printf "%s %.3f %s\n", w, s, l }'
  done >>"$work/results"
}

for ((n = 0; n < runs; n++)); do
  run restart $n
  run survive $n
done
echo "way seconds_from_failure_to_first_step steps_lost ($mode)"
cat "$work/results"
for way in restart survive; do
  awk -v w=$way '$1 == w { print $2 }' "$work/results" | sort -n | awk -v w=$way '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s: median %.3f s over %d recoveries\n", w, m, NR }'
done
