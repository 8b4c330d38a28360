#!/usr/bin/env bash
# The calibration across the examples (issue 50, item 5): for each model — the Fashion-MNIST CNN,
# its MLP and the GPT example's tiny preset — `cohort run` on 1, 2 and 3 local ranks, ROUNDS
# times, models and sizes interleaved so that a change in the machine's load touches each alike; a
# calibration fitted on that model's 1- and 2-rank runs predicts its 3-rank runs, one fitted on
# the 1-rank runs alone the 2- and 3-rank ones, and one fitted on the 2-rank runs alone the 1- and
# 3-rank ones (1 rank has 2 threads, a count that fit never saw: marked). Prints per model and size the median of
# the measured steps, the prediction and its error (bench/sim/sim_compare.py).
# calibrate refuses runs that other work slowed (docs/sim.md, "Load the simulator does not
# model"): run this on a quiet machine; its refusal is printed and ends the bench.
# THREADS=N gives every worker N intra-op threads (--threads-per-proc): with THREADS=1 the 1-rank
# runs have the 2- and 3-rank runs' one thread, so a fit on one size sees the others' count.
# Unset: the launcher's default (cores / local ranks: 1 rank has 2 threads).
#   usage: [COHORT_BUILD=build] [THREADS=N] bench/sim/sim_models.sh [ROUNDS (3)]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
build=${COHORT_BUILD:-build}
cli=$build/tools/cohort
fmnist=$build/examples/fashion_mnist/fashion_mnist
gpt=$build/examples/gpt/gpt
for x in "$cli" "$fmnist" "$gpt"; do [ -x "$x" ] || { echo "sim_models: build first (bash scripts/setup.sh): no $x" >&2; exit 2; }; done
threads=(); [ -z "${THREADS:-}" ] || threads=(--threads-per-proc "$THREADS")
work=$(mktemp -d /tmp/cohort_sim_models.XXXXXX)
trap 'pkill -9 -f "$work" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

command_of() {
  case $1 in
    cnn) echo "$fmnist --max-steps 150 --no-eval" ;;
    mlp) echo "$fmnist --model mlp --max-steps 300 --no-eval" ;;
    gpt) echo "$gpt --preset tiny --steps 40 --sample-tokens 0" ;;
  esac
}
models=${MODELS:-cnn mlp gpt}
for r in $(seq "$rounds"); do
  for m in $models; do
    for n in 1 2 3; do
      # shellcheck disable=SC2046
      "$cli" run --nproc-per-node "$n" "${threads[@]}" --no-dashboard --log-dir "$work/$m-r$r-n$n" -- $(command_of "$m") \
        >"$work/$m-r$r-n$n.out" 2>&1 || { cat "$work/$m-r$r-n$n.out" >&2; exit 1; }
    done
  done
done
for m in $models; do
  one=(); two=(); only2=(); all=()
  for r in $(seq "$rounds"); do
    one+=("$work/$m-r$r-n1"); two+=("$work/$m-r$r-n1" "$work/$m-r$r-n2"); only2+=("$work/$m-r$r-n2")
    all+=("$work/$m-r$r-n1" "$work/$m-r$r-n2" "$work/$m-r$r-n3")
  done
  "$cli" sim calibrate "${two[@]}" -o "$work/$m-12.json"
  "$cli" sim calibrate "${one[@]}" -o "$work/$m-1.json"
  "$cli" sim calibrate "${only2[@]}" -o "$work/$m-2.json"
  for fit in 12 1 2; do
    "$cli" sim predict --json --tolerance 1e9 --calibration "$work/$m-$fit.json" "${all[@]}" >"$work/$m-$fit-predicted.json"
    case $fit in 12) what="1 and 2 ranks"; sizes=1,2 ;; 1) what="1 rank"; sizes=1 ;; 2) what="2 ranks"; sizes=2, ;; esac
    echo "$m, fitted on $what:"
    python3 bench/sim/sim_compare.py "$work/$m-$fit-predicted.json" world ranks "$sizes"
  done
done
