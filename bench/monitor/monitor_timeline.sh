#!/usr/bin/env bash
# Timeline recording overhead (issue 49): the Fashion-MNIST example (CNN by default, batch 64 per
# rank; or its MLP) or the GPT example (gpt: preset tiny, sequences of 128, batch 8 per rank), one
# thread per rank, at 2 ranks under `cohort run`, with the step timeline recorded
# (COHORT_TIMELINE=1, the default: span stores at each phase mark, collectives' spans, the
# "timeline" object in every metrics datagram) and not (COHORT_TIMELINE=0; monitoring otherwise
# on), interleaved round by round and alternating which goes first. Prints each run's samples/s
# (tokens/s for gpt; as the example reports it) and the workers' own time in monitoring code
# (monitor_s, over the steps after the 10th: step() with the timeline's collection and JSON, and the
# gradient norm) as a share of step time; then the medians, the overhead (off - on) / off and the
# rounds' own on/off ratios. Goal: <= 1 % (docs/BENCHMARKS.md).
# Not compared: the flight recorder's span of each ended collective, kept on both sides
# (COHORT_TIMELINE=0 leaves the spans untaken; the recorder still copies them until its buffer is full).
# Every run checks its result: both ranks end with the same parameter checksum.
#
#   bench/monitor/monitor_timeline.sh [ROUNDS (default 6)] [MAX_STEPS (default 300)] [MODEL (cnn, mlp, gpt)]
#
# COHORT_BUILD names the build directory (default: build).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-6}
steps=${2:-300}
model=${3:-cnn}
build=${COHORT_BUILD:-build}
cohort=$(realpath -m "$build/tools/cohort")
if [ "$model" = gpt ]; then
  example=$(realpath -m "$build/examples/gpt/gpt")
  args=(--preset tiny --seq-len 128 --batch 8 --threads 1 --log-every 0 --steps "$steps")
  unit=tokens/s
else
  example=$(realpath -m "$build/examples/fashion_mnist/fashion_mnist")
  args=(--model "$model" --no-eval --threads 1 --log-every 0 --max-steps "$steps")
  unit=samples/s
fi
[ -x "$cohort" ] && [ -x "$example" ] || { echo "monitor_timeline: build first (cohort_cli, and fashion_mnist or gpt)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_timeline_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# run TIMELINE ROUND: one job; prints "<samples/s or tokens/s> <monitor_s share of step_s, %> <spans per record>".
run() {
  local tl=$1 round=$2 dir="$work/run-$1-$2" log="$work/run-$1-$2.log"
  if ! COHORT_TIMELINE=$tl "$cohort" run --nproc-per-node 2 --threads-per-proc 1 --run-dir "$dir" -- "$example" \
      "${args[@]}" >"$log" 2>&1; then
    echo "monitor_timeline: the job failed (COHORT_TIMELINE=$tl); its output:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  /usr/bin/python3 - "$log" "$dir/events.jsonl" <<'PY'
import json, re, sys
rows = [json.loads(m) for m in re.findall(r'\{.*"param_checksum".*\}', open(sys.argv[1]).read())]
assert len(rows) == 2 and rows[0]["param_checksum"] == rows[1]["param_checksum"], "the ranks' parameters differ"
mon = step = spans = records = 0
for line in open(sys.argv[2]):
    e = json.loads(line)
    if e.get("type") == "metrics" and e.get("step", 0) > 10:
        mon += float(e.get("monitor_s", 0)); step += float(e["step_s"]); records += 1
        spans += len(e.get("timeline", {}).get("spans", []))
r0 = next(r for r in rows if r["rank"] == 0)
sps = r0.get("samples_per_s", r0.get("tokens_per_s"))
print(f"{sps} {100 * mon / step:.4f} {spans / max(records, 1):.1f}")
PY
}

echo "timeline overhead: $([ "$model" = gpt ] && echo "gpt tiny" || echo "fashion_mnist $model"), 2 ranks x 1 thread, $steps steps, $rounds rounds (interleaved)"
echo "machine: $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg)"
on=(); off=(); share_on=(); share_off=()
for i in $(seq "$rounds"); do
  if (( i % 2 )); then order="1 0"; else order="0 1"; fi
  for t in $order; do
    read -r s sh sp < <(run "$t" "$i")
    if [ "$t" = 1 ]; then on+=("$s"); share_on+=("$sh"); else off+=("$s"); share_off+=("$sh"); fi
    printf 'round %d  timeline %-3s  %10.1f %s   monitoring code %7.4f%% of step time   %5.1f spans/record\n' \
      "$i" "$([ "$t" = 1 ] && echo on || echo off)" "$s" "$unit" "$sh" "$sp"
  done
done
/usr/bin/python3 - "${on[*]}" "${off[*]}" "${share_on[*]}" "${share_off[*]}" "$unit" <<'PY'
import statistics as st, sys
on, off, son, soff = ([float(x) for x in a.split()] for a in sys.argv[1:5])
m_on, m_off = st.median(on), st.median(off)
pairs = sorted(a / b for a, b in zip(on, off))
print(f"median {sys.argv[5]}: timeline on {m_on:.1f}, off {m_off:.1f}; overhead {(m_off - m_on) / m_off * 100:+.2f} % "
      f"(ratio on/off {m_on / m_off:.4f}; the rounds' own ratios: median {st.median(pairs):.4f}, {pairs[0]:.4f}-{pairs[-1]:.4f})")
print(f"median monitoring code share of step time: on {st.median(son):.4f} %, off {st.median(soff):.4f} % "
      f"(the timeline's own cost in step(): {st.median(son) - st.median(soff):+.4f} % of step time)")
PY
