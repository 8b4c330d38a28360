#!/usr/bin/env bash
# GPT training throughput (issue 16): examples/gpt (C++, cohort DDP, FusedAdamW) against the same
# model and step in Python with PyTorch's DDP (bench/peer_gpt.py), 2 ranks x 1 thread, preset tiny,
# interleaved rounds; prints both medians of tokens/s and their ratio. Both sides check their result
# (the C++ ranks must agree on the parameters' checksum; both losses finite).
#   usage: [COHORT_BUILD=build] [PEER_PYTHON=python] [SHAPE="--layers 2 --dim 128"] [COHORT_FLAGS="--aten-gelu"] bench/gpt_throughput.sh [ROUNDS (3)] [STEPS (20)] [SEQ_LEN (256)]
# SHAPE overrides the tiny preset's depth and width on both sides (a smaller model shows the
# per-operation overheads that the tiny preset's kernels hide). COHORT_FLAGS go to the C++ side
# only (--aten-gelu: ATen's tanh-GELU instead of the example's kernel, to show what that kernel gives).
# Same libtorch on both sides: COHORT_BUILD=build-torch2 PEER_PYTHON=~/.cache/cohort/venv-torch2/bin/python
# (libtorch 1.13 has no scaled_dot_product_attention: there the C++ side uses an explicit masked
# softmax and the Python peer cannot run).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-20}
seq=${3:-256}
build=${COHORT_BUILD:-build}
py=${PEER_PYTHON:-/usr/bin/python3}
bin=$build/examples/gpt/gpt
read -r -a shape <<< "${SHAPE:-}"
read -r -a cohort_flags <<< "${COHORT_FLAGS:-}"
[ -x "$bin" ] || { echo "gpt_throughput: build first (ninja -C $build gpt)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

two_ranks() {  # label, command...: both ranks' last lines into $out/label.<round>
  local label=$1; shift
  local port=$(( 21000 + RANDOM % 20000 )) pids=() r
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" > "$out/r$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "gpt_throughput: $label failed:" >&2; cat "$out/r0" "$out/r1" >&2; exit 1; }; done
  tail -n 1 "$out/r0" >> "$out/$label"; tail -n 1 "$out/r1" >> "$out/$label.rank1"
}

for (( i = 0; i < rounds; i++ )); do
  two_ranks cohort "$bin" --preset tiny "${shape[@]}" --seq-len "$seq" --steps "$steps" --batch 8 --threads 1 --log-every 0 \
    --sample-tokens 0 --eval-windows 2 --timing-warmup 3 "${cohort_flags[@]}"
  two_ranks peer "$py" bench/peer_gpt.py --preset tiny "${shape[@]}" --seq-len "$seq" --steps "$steps" --batch 8 --timing-warmup 3
  echo "round $((i + 1))/$rounds done" >&2
done
"$py" - "$out" "${shape[@]}" "--seq-len $seq" <<'PY'
import json, math, statistics, sys
d = sys.argv[1]
rows = {k: [json.loads(l) for l in open(f"{d}/{k}")] for k in ("cohort", "peer")}
other = [json.loads(l) for l in open(f"{d}/cohort.rank1")]
for a, b in zip(rows["cohort"], other):
    assert a["param_checksum"] == b["param_checksum"], "cohort's ranks disagree"
    assert math.isfinite(a["val_loss"]), a
for r in rows["peer"]:
    assert math.isfinite(r["train_loss"]), r
c = [r["tokens_per_s"] for r in rows["cohort"]]
p = [r["tokens_per_s"] for r in rows["peer"]]
ratios = [x / y for x, y in zip(c, p)]
print(f"GPT tiny {' '.join(sys.argv[2:])}, 2 ranks x 1 thread, {rows['cohort'][0]['parameters']} parameters, torch {rows['peer'][0]['torch']}")
print(f"cohort (C++, DDP, FusedAdamW) median {statistics.median(c):,.0f} tokens/s (runs: {', '.join(f'{x:,.0f}' for x in c)})")
print(f"PyTorch DDP (Python)           median {statistics.median(p):,.0f} tokens/s (runs: {', '.join(f'{x:,.0f}' for x in p)})")
print(f"cohort / PyTorch = {statistics.median(c) / statistics.median(p):.2f}x (median of the rounds' ratios {statistics.median(ratios):.2f}x, "
      f"{min(ratios):.2f}-{max(ratios):.2f}); cohort's MFU {statistics.median(r['mfu'] for r in rows['cohort']):.1%} of the measured GEMM rate")
PY
