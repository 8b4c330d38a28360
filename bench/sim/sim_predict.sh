#!/usr/bin/env bash
# How well a calibrated simulator predicts real runs (issue 17). The Fashion-MNIST CNN trained by
# `cohort run` on 1, 2, 3 and 4 local ranks (3 and 4 oversubscribe a 2-core machine), ROUNDS times,
# the sizes interleaved so that a change in the machine's load touches every size alike; a
# calibration fitted on the 1- and 2-rank runs predicts every run (`cohort sim predict`). Then the
# recovery: two 2-rank jobs with checkpoints each lose a rank to SIGKILL three times; the
# calibration of the first predicts the second's recovery (failure to the next round's first step).
# Prints, per size, the median of the measured step times (and each round's), the prediction and
# its error (bench/sim/sim_compare.py), the worst among the 3- and 4-rank sizes, then the recovery.
# It is a measurement of timing, so it lives here and not in the tests: a loaded machine moves it
# by tens of per cent (a CI run that compiled beside it saw +44 %).
#   usage: [COHORT_BUILD=build] bench/sim/sim_predict.sh [ROUNDS (3)] [STEPS (150)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
steps=${2:-150}
build=${COHORT_BUILD:-build}
cli=$build/tools/cohort
example=$build/examples/fashion_mnist/fashion_mnist
[ -x "$cli" ] && [ -x "$example" ] || { echo "sim_predict: build first (bash scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_sim_predict.XXXXXX)
trap 'pkill -9 -f "$work" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

for r in $(seq "$rounds"); do
  for n in 1 2 3 4; do
    "$cli" run --nproc-per-node "$n" --no-dashboard --log-dir "$work/r$r-n$n" -- "$example" --max-steps "$steps" --no-eval \
      >"$work/r$r-n$n.out" 2>&1 || { cat "$work/r$r-n$n.out" >&2; exit 1; }
  done
done
fit=(); all=()
for r in $(seq "$rounds"); do fit+=("$work/r$r-n1" "$work/r$r-n2"); all+=("$work/r$r-n1" "$work/r$r-n2" "$work/r$r-n3" "$work/r$r-n4"); done
"$cli" sim calibrate "${fit[@]}" -o "$work/steps.json" 2>/dev/null
"$cli" sim predict --json --tolerance 1e9 --calibration "$work/steps.json" "${all[@]}" >"$work/steps-predicted.json"

# killed DIR: a 2-rank job whose rank is SIGKILLed three times, each once its round passed a step
# (70, 100, 130); it restarts from its checkpoint each time and finishes.
killed() {
  local dir=$1 kills=0 top
  "$cli" run --nproc-per-node 2 --no-dashboard --max-restarts 3 --log-dir "$dir" -- "$example" --ckpt-dir "$dir-ckpt" \
    --ckpt-every 40 --max-steps 240 --no-eval >"$dir.out" 2>&1 &
  local job=$!
  while [ "$kills" -lt 3 ] && kill -0 "$job" 2>/dev/null; do
    sleep 0.05
    top=$(python3 - "$dir/events.jsonl" "$kills" <<'EOF'
import json, sys
top = 0
try:
    for line in open(sys.argv[1]):
        try: m = json.loads(line)
        except ValueError: continue
        if m.get("type") == "metrics" and m.get("restart", -1) == int(sys.argv[2]): top = max(top, m.get("step", 0))
except OSError: pass
print(top)
EOF
)
    [ "$top" -gt $((70 + 30 * kills)) ] || continue
    local p; p=$(pgrep -f -- "^$example --ckpt-dir $dir-ckpt " | head -1 || true)
    [ -n "$p" ] && kill -9 "$p" && kills=$((kills + 1))
  done
  wait "$job" || { cat "$dir.out" >&2; exit 1; }
  [ "$kills" = 3 ] || { echo "sim_predict: only $kills kills in $dir" >&2; exit 1; }
}
killed "$work/killed-a"
killed "$work/killed-b"
"$cli" sim calibrate "$work/killed-a" -o "$work/recovery.json" 2>/dev/null
"$cli" sim predict --json --tolerance 1e9 --calibration "$work/recovery.json" "$work/killed-b" >"$work/recovery-predicted.json"

python3 bench/sim/sim_compare.py "$work/steps-predicted.json" world ranks 2
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))[0]
print("recovery: %.3f s measured, %.3f s predicted (%+.1f %%)" % (r["measured_recovery_s"], r["predicted_recovery_s"], r["recovery_error"] * 100))' \
  "$work/recovery-predicted.json"
