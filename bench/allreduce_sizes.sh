#!/usr/bin/env bash
# DDP's flat and hierarchical allreduce, bucket size by bucket size (issue 18: where the automatic
# choice should take which): NODES "machines" (default 2) as network namespaces on a bridge, every
# link shaped with tc to RATE both ways (bench/netns_star.sh), 2 ranks per node, the program
# bench/allreduce_sizes.cpp under `cohort run`. Prints, per size, the median time of one bucket's
# average with each and the hierarchical one's speed-up.
# Timing, so a benchmark: run it on an otherwise idle machine. Needs root and iproute2.
# The addresses (10.79.3.0/24) exist only inside the namespaces this script creates and removes.
#   usage: [COHORT_BUILD=build] [RATE=1gbit] [NODES=2] bench/allreduce_sizes.sh [MAX_BYTES (16777216)]
set -euo pipefail
cd "$(dirname "$0")/.."
max_bytes=${1:-16777216}
rate=${RATE:-1gbit}
nodes=${NODES:-2}
build=${COHORT_BUILD:-build}
cli=$(realpath "$build/tools/cohort")
probe=$(realpath "$build/bench/allreduce_sizes")
[ -x "$cli" ] && [ -x "$probe" ] || { echo "allreduce_sizes: build first (cmake --build $build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "allreduce_sizes: needs root (ip netns)" >&2; exit 2; }
export COHORT_JOB_TOKEN=${COHORT_JOB_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
work=$(mktemp -d /tmp/cohort_allreduce_sizes.XXXXXX)
id=$$
sw=cohort_aw$id
cleanup() {
  pkill -9 -f "$probe" 2>/dev/null || true
  for i in $(seq 0 $((nodes - 1))); do ip netns del "cohort_a${id}_$i" 2>/dev/null || true; done
  ip netns del "$sw" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
. bench/netns_star.sh
netns_star "$sw" "cohort_a${id}_" "ca${id}_" 10.79.3 "$nodes" "$rate"
pids=()
for i in $(seq 0 $((nodes - 1))); do
  ip netns exec "cohort_a${id}_$i" "$cli" run --nnodes "$nodes" --node-rank "$i" --nproc-per-node 2 --no-dashboard \
    --threads-per-proc 1 --master-addr 10.79.3.1 --master-port 29650 --rdzv-timeout 60 -- "$probe" \
    --max-bytes "$max_bytes" >"$work/node$i" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" || { cat "$work/node$i" >&2; exit 1; }; done
echo "link $rate, $nodes nodes x 2 ranks; one bucket's average, median of 15 calls"
python3 - "$work/node0" <<'PY'
import json, sys
print(f"{'bytes':>10} {'flat ms':>9} {'hierarchical ms':>16} {'speed-up':>9}")
for line in open(sys.argv[1]):
    line = line.split('] ', 1)[-1]
    if not line.startswith('{'):
        continue
    r = json.loads(line)
    print(f"{r['bytes']:>10} {r['flat_ms']:>9.3f} {r['hierarchical_ms']:>16.3f} {r['hierarchical_speedup']:>8.2f}x")
PY
