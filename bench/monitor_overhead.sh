#!/usr/bin/env bash
# Monitoring overhead (issue 6): the Fashion-MNIST example (CNN, batch 64 per rank, one thread per
# rank) at 2 ranks under `cohort run`, with the worker's monitoring on (COHORT_MONITOR=1: phase
# marks, gradient norm, a metrics datagram per step to the agent) and off (COHORT_MONITOR=0: steps
# only counted), interleaved round by round so that both sides see the same machine. Prints each
# run's samples/s (whole job, after the example's 10 warm-up steps), the medians, and the overhead:
# (off - on) / off. Goal: <= 2% (docs/BENCHMARKS.md).
# On a shared 2-core machine run-to-run noise (±10%) hides a 2% effect, so each run also reports
# what monitoring cost directly, from its events.jsonl: the workers' own time in monitoring code
# (monitor_s, the gradient norm and step()) as a share of their step time, and the agent's CPU
# time (agent_cpu_s of the "finished" event) per second of the run, monitor on and off.
#
#   bench/monitor_overhead.sh [ROUNDS (default 5)] [MAX_STEPS (default 300)]
#
# COHORT_BUILD names the build directory (default: build); COHORT_CLI and COHORT_EXAMPLE may name
# the two binaries one by one. Every run also checks its result: both
# ranks report the same parameter checksum.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
steps=${2:-300}
build=${COHORT_BUILD:-build}
cohort=$(realpath -m "${COHORT_CLI:-$build/tools/cohort}")
example=$(realpath -m "${COHORT_EXAMPLE:-$build/examples/fashion_mnist/fashion_mnist}")
[ -x "$cohort" ] && [ -x "$example" ] || { echo "monitor_overhead: build first (ninja -C $build cohort_cli fashion_mnist)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_monitor_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"  # cohort run's default run directory (cohort-runs/...) lands here

# run MONITOR ROUND: one job; prints its samples/s.
run() {
  local monitor=$1 round=$2 log="$work/run-$1-$2.log" lines
  if ! COHORT_MONITOR=$monitor "$cohort" run --nproc-per-node 2 --threads-per-proc 1 --run-dir "$work/run-$1-$2" -- "$example" --no-eval \
      --threads 1 --log-every 0 --max-steps "$steps" >"$log" 2>&1; then
    echo "monitor_overhead: the job failed (COHORT_MONITOR=$monitor); its output:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  # One JSON result line per rank ("[r] {...}" through cohort run's relay).
  lines=$(grep -o '{.*"param_checksum".*}' "$log" || true)
  /usr/bin/python3 - "$lines" <<'EOF'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
assert len(rows) == 2, f"expected 2 result lines, got {len(rows)}"
assert rows[0]["param_checksum"] == rows[1]["param_checksum"], "the ranks' parameters differ"
print(next(r for r in rows if r["rank"] == 0)["samples_per_s"])
EOF
}

# cost RUN_DIR: "<monitor_s share of step_s, %> <agent CPU s per run second>" from the run's log.
cost() {
  /usr/bin/python3 - "$1/events.jsonl" <<'EOF'
import json, sys
mon = step = 0.0
first_t = last_t = agent = None
for line in open(sys.argv[1]):
    e = json.loads(line)
    first_t = e["t"] if first_t is None else first_t
    last_t = e["t"]
    if e.get("type") == "metrics" and e.get("step", 0) > 10:  # after the example's warm-up steps
        mon += float(e.get("monitor_s", 0)); step += float(e["step_s"])
    if e.get("type") == "event" and e.get("kind") == "finished":
        agent = e.get("agent_cpu_s")
share = 100 * mon / step if step > 0 else 0.0
print(f"{share:.3f} {agent / (last_t - first_t):.4f}")
EOF
}

echo "monitoring overhead: fashion_mnist cnn, 2 ranks x 1 thread, $steps steps, $rounds rounds (interleaved)"
echo "machine: $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg)"
on=(); off=(); share=(); agent_on=(); agent_off=()
for i in $(seq "$rounds"); do
  # Alternate which side goes first, so that neither always runs on a warmer machine.
  if (( i % 2 )); then a=1; b=0; else a=0; b=1; fi
  for m in $a $b; do
    s=$(run "$m" "$i")
    read -r sh ag < <(cost "$work/run-$m-$i")
    if [ "$m" = 1 ]; then on+=("$s"); share+=("$sh"); agent_on+=("$ag"); else off+=("$s"); agent_off+=("$ag"); fi
    printf 'round %d  monitor %-3s  %10.1f samples/s   workers in monitoring code %6.3f%% of step time   agent %.4f CPU s/s\n' \
      "$i" "$([ "$m" = 1 ] && echo on || echo off)" "$s" "$sh" "$ag"
  done
done
/usr/bin/python3 - "${on[*]}" "${off[*]}" "${share[*]}" "${agent_on[*]}" "${agent_off[*]}" <<'EOF'
import statistics, sys
on, off, share, a_on, a_off = ([float(x) for x in arg.split()] for arg in sys.argv[1:6])
m_on, m_off = statistics.median(on), statistics.median(off)
print(f"median samples/s: monitor on {m_on:.1f}, off {m_off:.1f}")
print(f"A/B overhead: {(m_off - m_on) / m_off * 100:+.2f}% of the step time from the medians (goal <= 2%; run-to-run noise here ~±10%)")
paired = statistics.median((f - o) / f * 100 for o, f in zip(on, off))
print(f"A/B overhead, median of the rounds' own on/off pairs: {paired:+.2f}%")
print(f"measured: the workers spend {statistics.median(share):.3f}% of their step time in monitoring code (median)")
d = statistics.median(a_on) - statistics.median(a_off)
print(f"measured: the agent uses {statistics.median(a_on):.4f} CPU s/s with monitoring on, {statistics.median(a_off):.4f} off "
      f"(+{d:.4f}: {100 * d / 2:.2f}% of the machine's 2 cores)")
EOF
