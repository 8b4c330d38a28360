#!/usr/bin/env bash
# Data-parallel throughput, side by side in one run: cohort's DDP (examples/fashion_mnist) against
# PyTorch's Python DDP (bench/peer_ddp.py) on the same libtorch 1.13, Gloo and OpenBLAS; same models,
# batch 64 per rank, one intra-op thread per rank, Fashion-MNIST. Also one plain process of each
# without any distributed code, the baseline of scaling efficiency.
#
#   bench/ddp_throughput.sh [REPEATS]     (default 3; runs are interleaved, medians are reported)
#   MODELS="cnn" WORLDS="plain" bench/ddp_throughput.sh 10   (some rows only: models cnn mlp, worlds
#   plain 1 2 2m 2r as below)
#
# Against PyTorch 2.x on the same libtorch: cohort built against the wheel's libtorch
# (scripts/build-torch2.sh) and the peer run by the wheel's Python (docs/torch2.md):
#   COHORT_BUILD=build-torch2 PEER_PYTHON=~/.cache/cohort/venv-torch2/bin/python bench/ddp_throughput.sh 3
# (PyTorch's wheels use MKL, not OpenBLAS: both sides then run MKL's kernels.)
#
# Row "2, peer with cohort's malloc settings": cohort::init() makes glibc keep freed memory for the
# next step (cohort/memory_reuse.h); this row gives the Python peer the same settings through
# GLIBC_TUNABLES, to show how much of the difference that alone makes. Ratios are also reported as
# the median of each round's ratio (cohort and peer run back to back), steadier on a shared machine.
#
# OpenBLAS's kernels: both sides run the ones OPENBLAS_CORETYPE names, unset by default (OpenBLAS's own
# choice; Debian 12's OpenBLAS does not know this machine's CPU and runs generic SSE3 kernels). The
# kernels `cohort run` gives its workers here (runtime/host/blas_core.h), for both sides alike:
#   OPENBLAS_CORETYPE=Cooperlake bench/ddp_throughput.sh 4
# The summary names the kernels both sides ran. Row "2, cohort under `cohort run`" starts cohort's
# ranks with the launcher, which gives them OpenBLAS's kernels for this CPU when OpenBLAS would run
# its generic ones (docs/data-parallel.md), and the peer's by hand: what each user gets by default,
# not a like-for-like comparison of data parallelism when the kernels differ.
#
# samples/s is the whole job's training throughput after 10 warm-up steps (docs/ARCHITECTURE.md). Every run
# also checks its result: all ranks must report the same parameter checksum (cohort) and a finite loss.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
build=${COHORT_BUILD:-build}
example=$build/examples/fashion_mnist/fashion_mnist
peer_python=${PEER_PYTHON:-/usr/bin/python3}
peer=("$peer_python" bench/peer_ddp.py)
export OPENBLAS_NUM_THREADS=1  # Python's torch does not set OpenBLAS's threads; cohort does it itself
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

steps_of() { [ "$1" = cnn ] && echo 150 || echo 300; }

# cohort::retain_freed_memory()'s settings, for the peer row that gets them too.
malloc_tunables=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824

# run KIND MODEL WORLD → appends the rank-0 JSON line to $out/KIND-MODEL-WORLD
# (WORLD "2m": 2 ranks, both sides with cohort's malloc settings in GLIBC_TUNABLES;
#  WORLD "2r": 2 ranks, cohort's started by `cohort run` — as a user starts them, with the OpenBLAS
#  kernels it chooses — and the peer's by hand as in row 2, as a Python user starts them)
run() {
  local kind=$1 model=$2 world=$3 steps port pids=() r
  local tunables=""
  if [ "$world" = 2m ]; then tunables=$malloc_tunables; fi
  local ranks=${world%[mr]}
  steps=$(steps_of "$model")
  port=$(( 21000 + RANDOM % 20000 ))
  if [ "$world" = 2r ] && [ "$kind" = cohort ]; then
    "$build"/tools/cohort run --nproc-per-node 2 --threads-per-proc 1 --no-dashboard --run-dir "$out/run" -- \
      "$example" --model "$model" --max-steps "$steps" --no-eval --threads 1 --log-every 0 > "$out/all"
    for (( r = 0; r < ranks; r++ )); do sed -n "s/^\[$r\] //p" "$out/all" > "$out/r$r"; done
  elif [ "$world" = plain ]; then
    case $kind in
      cohort) "$example" --plain --model "$model" --max-steps "$steps" --no-eval --threads 1 --log-every 0 > "$out/r0" ;;
      peer) "${peer[@]}" --plain --model "$model" --max-steps "$steps" > "$out/r0" ;;
    esac
  else
    for (( r = 0; r < ranks; r++ )); do
      if [ "$kind" = cohort ]; then
        GLIBC_TUNABLES=$tunables RANK=$r WORLD_SIZE=$ranks LOCAL_RANK=$r LOCAL_WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "$example" --model "$model" --max-steps "$steps" --no-eval --threads 1 --log-every 0 > "$out/r$r" &
      else
        GLIBC_TUNABLES=$tunables RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
          "${peer[@]}" --model "$model" --max-steps "$steps" > "$out/r$r" &
      fi
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
  fi
  /usr/bin/python3 - "$out" "$world" <<'PY' >> "$out/$kind-$model-$world"
import json, math, sys, glob
d, world = sys.argv[1], sys.argv[2]
n = 1 if world == "plain" else int(world.rstrip("mr"))
rows = [json.loads(open(f"{d}/r{r}").read().strip().splitlines()[-1]) for r in range(n)]
assert all(math.isfinite(x["final_loss"]) for x in rows), rows
sums = {x.get("param_checksum") for x in rows}
assert len(sums) == 1, f"ranks disagree: {sums}"
print(json.dumps(rows[0]))
PY
}

export MODELS=${MODELS:-cnn mlp} WORLDS=${WORLDS:-plain 1 2 2m 2r}
for (( i = 0; i < repeats; i++ )); do
  for model in $MODELS; do
    for world in $WORLDS; do
      for kind in cohort peer; do run "$kind" "$model" "$world"; done
    done
  done
  echo "round $((i + 1))/$repeats done" >&2
done

"$peer_python" -c 'import torch; print("libtorch " + torch.__version__ + (", MKL" if torch.backends.mkl.is_available() else ""))' > "$out/libtorch"
# The kernels cohort run gives its workers (only for the summary: a build without the CLI says so).
if [ -x "$build"/tools/cohort ]; then
  "$build"/tools/cohort run --no-dashboard --run-dir "$out/run" --nproc-per-node 1 -- /usr/bin/env 2>/dev/null |
    sed -n 's/^\[0\] OPENBLAS_CORETYPE=//p' > "$out/launcher_core" || true
else
  echo "unknown ($build has no tools/cohort)" > "$out/launcher_core"
fi
[ -s "$out/launcher_core" ] || echo "OpenBLAS's own choice" > "$out/launcher_core"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys, os
d = sys.argv[1]
def runs(kind, model, world):
    return [json.loads(l)["samples_per_s"] for l in open(os.path.join(d, f"{kind}-{model}-{world}"))]
def med(kind, model, world):
    xs = runs(kind, model, world)
    return statistics.median(xs), len(xs)
labels = {"plain": "1, no DDP (plain)", "1": "1", "2": "2", "2m": "2, peer with cohort's malloc settings",
          "2r": "2, cohort under `cohort run`, peer by hand"}
print("| model | ranks | cohort samples/s | PyTorch DDP samples/s | cohort / PyTorch | median of the rounds' ratios (min-max) |")
print("|---|---|---|---|---|---|")
models, worlds = os.environ["MODELS"].split(), os.environ["WORLDS"].split()
for model in models:
    for world in worlds:
        c, n = med("cohort", model, world); p, _ = med("peer", model, world)
        ratios = [a / b for a, b in zip(runs("cohort", model, world), runs("peer", model, world))]
        print(f"| {model} | {labels[world]} | {c:,.0f} | {p:,.0f} | {c / p:.2f}x | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
if "plain" in worlds and "2" in worlds:
    print()
    print("| model | scaling efficiency at 2 ranks (2-rank / 2 x own plain process) | cohort | PyTorch |")
    print("|---|---|---|---|")
for model in (models if "plain" in worlds and "2" in worlds else []):
    c2, _ = med("cohort", model, "2"); c1, _ = med("cohort", model, "plain")
    p2, _ = med("peer", model, "2"); p1, _ = med("peer", model, "plain")
    print(f"| {model} | | {c2 / (2 * c1):.2f} | {p2 / (2 * p1):.2f} |")
print(f"\n(medians of {n} runs each; cnn {150} steps, mlp {300} steps, first 10 not timed)")
import ctypes
core = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
core.restype = ctypes.c_char_p
print("Both sides: " + open(os.path.join(d, "libtorch")).read().strip())
print(f"OpenBLAS kernels (where the libtorch uses OpenBLAS), both sides: {core().decode()} (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
      f"cohort's under `cohort run`: {open(os.path.join(d, 'launcher_core')).read().strip()}")
PY
