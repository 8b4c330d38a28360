#!/usr/bin/env bash
# In-memory snapshots every step (issue 19): what they cost a training step, and how much memory
# they hold. The Fashion-MNIST CNN (batch 64 per rank) and the GPT example (preset tiny, AdamW) at
# 2 ranks x 1 thread under `cohort run`, each with --snapshot-every 1 and without (the same
# --ckpt-dir, no checkpoint due), interleaved round by round so that both sides see the same
# machine. Prints each run's throughput, the medians and the overhead (off - on) / off (for the
# CNN also by rank 0's median step time, which the steps during which another process took a core
# do not move: the steady cost of a snapshot), and the
# largest size the job's snapshot directory (/dev/shm) reached, sampled every 0.25 s in one more
# run with snapshots after the rounds: its throughput is not counted, since the sampling (a du
# every 0.25 s, ~0.8 % of the two cores) would load only the side with snapshots.
# Goal: <= 5 % for the CNN (docs/BENCHMARKS.md).
#
#   bench/checkpoint/snapshot_overhead.sh [ROUNDS (default 5)] [CNN_STEPS (default 400)] [GPT_STEPS (default 60)]
#
# COHORT_BUILD names the build directory (default: build); MODELS the models measured (default
# "cnn gpt"). Every run also checks its result: both ranks report the same parameter checksum,
# with and without snapshots alike.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
cnn_steps=${2:-400}
gpt_steps=${3:-60}
build=${COHORT_BUILD:-build}
cohort=$(realpath -m "$build/tools/cohort")
cnn=$(realpath -m "$build/examples/fashion_mnist/fashion_mnist")
gpt=$(realpath -m "$build/examples/gpt/gpt")
[ -x "$cohort" ] && [ -x "$cnn" ] && [ -x "$gpt" ] || { echo "snapshot_overhead: build first (bash scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_snapshot_bench.XXXXXX)
trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT

# run MODEL EVERY ROUND [sample]: one job; prints "<throughput> <checksum> <peak snapshot bytes>
# <median step ms>" (0 bytes unless asked to sample; 0 ms for the GPT example, which has no median).
run() {
  local model=$1 every=$2 round=$3 sample=${4:-} dir="$work/$1-$2-$3" pid peak=0 bytes
  mkdir -p "$dir"
  local args=(--ckpt-dir "$dir/ck" --snapshot-every "$every")
  if [ "$model" = cnn ]; then
    args=("$cnn" --no-eval --threads 1 --log-every 0 --max-steps "$cnn_steps" "${args[@]}")
  else
    args=("$gpt" --preset tiny --steps "$gpt_steps" --batch 8 --threads 1 --log-every 0 --sample-tokens 0 \
          --eval-windows 2 --timing-warmup 3 "${args[@]}")
  fi
  "$cohort" run --nproc-per-node 2 --threads-per-proc 1 --no-dashboard --run-dir "$dir/run" -- "${args[@]}" >"$dir/log" 2>&1 &
  pid=$!
  # The agent's snapshot directory is named after its pid (launcher/workers/snapshot_memory.h).
  while [ -n "$sample" ] && kill -0 "$pid" 2>/dev/null; do
    bytes=$(du -sb /dev/shm/cohort-snapshots-"$pid"-* 2>/dev/null | awk '{s += $1} END {print s + 0}')
    [ "$bytes" -gt "$peak" ] && peak=$bytes
    sleep 0.25
  done
  wait "$pid" || { echo "snapshot_overhead: $model (--snapshot-every $every) failed:" >&2; tail -20 "$dir/log" >&2; exit 1; }
  grep -o '{.*"param_checksum".*}' "$dir/log" | /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
assert len(rows) == 2, f"expected 2 result lines, got {len(rows)}"
assert rows[0]["param_checksum"] == rows[1]["param_checksum"], "the ranks differ"
r0 = next(r for r in rows if r["rank"] == 0)
print(r0.get("samples_per_s", r0.get("tokens_per_s")), r0["param_checksum"], sys.argv[1], r0.get("step_ms_median", 0))' "$peak"
}

echo "snapshot overhead: 2 ranks x 1 thread, $rounds rounds; machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${MODELS:-cnn gpt}; do
  off=(); on=(); off_ms=(); on_ms=(); sums=()
  for ((i = 0; i < rounds; i++)); do
    read -r a sa _ ma <<<"$(run "$model" 0 "$i")"
    read -r b sb _ mb <<<"$(run "$model" 1 "$i")"
    off+=("$a"); on+=("$b"); off_ms+=("$ma"); on_ms+=("$mb"); sums+=("$sa" "$sb")
    steps=""; [ "$ma" = 0 ] || steps="; median step $ma and $mb ms"
    echo "  $model round $i: without $a, with snapshots every step $b (per second)$steps"
  done
  read -r _ sm peak _ <<<"$(run "$model" 1 memory sample)"
  sums+=("$sm")
  echo "  $model memory run (not timed): snapshot memory peak $peak bytes"
  [ "$(printf '%s\n' "${sums[@]}" | sort -u | wc -l)" = 1 ] || echo "  WARNING: $model results differ between runs"
  /usr/bin/python3 - "$model" "${off[*]}" "${on[*]}" "$peak" "${off_ms[*]}" "${on_ms[*]}" <<'PY'
import statistics, sys
model, off, on = sys.argv[1], *[[float(x) for x in a.split()] for a in sys.argv[2:4]]
peaks = [float(sys.argv[4])]
off_ms, on_ms = [[float(x) for x in a.split()] for a in sys.argv[5:7]]
if min(off_ms + on_ms) > 0:
    a, b = statistics.median(off_ms), statistics.median(on_ms)
    rounds = sorted(100 * (y - x) / x for x, y in zip(off_ms, on_ms))
    print(f"{model}: median step {a:.2f} ms without, {b:.2f} ms with snapshots every step: overhead {100 * (b - a) / a:+.1f} %"
          f" (median of the rounds' own {statistics.median(rounds):+.1f} %, range {rounds[0]:+.1f} to {rounds[-1]:+.1f} %)")
a, b = statistics.median(off), statistics.median(on)
unit = "samples/s" if model == "cnn" else "tokens/s"
own = sorted(100 * (x - y) / x for x, y in zip(off, on))
print(f"{model}: median {a:.1f} {unit} without, {b:.1f} with snapshots every step: overhead {100 * (a - b) / a:+.1f} %"
      f" (median of the rounds' own {statistics.median(own):+.1f} %, range {own[0]:+.1f} to {own[-1]:+.1f} %);"
      f" snapshot memory (tmpfs) peak {max(peaks) / 1e6:.1f} MB")
PY
done
