#!/usr/bin/env bash
# gpu-check.sh: the CUDA check for a machine with an NVIDIA GPU and a CUDA PyTorch 2.x in its
# python3. Builds cohort against that PyTorch's libtorch (with its NCCL), runs every CUDA test — a
# world of one over NCCL: DDP, each sharding level, checkpoints of CUDA parameters, optimizer state
# and CUDA RNG, the monitor's CUDA memory, the init errors — then, on a GPU, the GPT example at
# GPT-2 124M size (bf16 autocast, batch 16 x 1024 tokens, a world of one over NCCL: tokens/s and
# MFU against the H100/H200's 989 TFLOP/s) beside its Python peer with PyTorch's DDP on the same
# GPU (bench/peer_gpt.py: default and fused AdamW), both sides' step phase by phase
# (--phase-times), and prints one JSON line of results.
# Sized to fit in 8 minutes on 16 cores (only the targets the CUDA tests need are built).
#
# Without a GPU it still builds and runs the same tests, which then skip with their reason, and the
# JSON line says so ("gpu": null): that is how tests/gpu_check_test.sh checks it on CPU machines.
#
# Environment: GPU_CHECK_PYTHON (default python3: the one with torch), GPU_CHECK_BUILD (default
# build-gpu), GPU_CHECK_DEPS (a folder with the Debian build dependencies for a machine that has
# none and can reach no registry, made by scripts/gpu-deps.sh and carried along; optional).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
python="${GPU_CHECK_PYTHON:-python3}"
build="${GPU_CHECK_BUILD:-build-gpu}"
jobs="$(nproc)"
log="${OUT:-/tmp}/gpu-check.log"
: > "$log"

fail() {  # one JSON line naming the stage that failed, the end of its output in the log
  "$python" - "$1" "$log" "$start" <<'PY'
import json, sys, time
stage, log, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
tail = open(log, errors="replace").read()[-1500:]
print(json.dumps({"ok": False, "failed": stage, "seconds": round(time.time() - start, 1), "log_tail": tail}))
PY
  exit 1
}

prefix="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>>"$log")" || fail "python3 has no torch"
deps=()
if [ -n "${GPU_CHECK_DEPS:-}" ]; then
  export PKG_CONFIG_SYSROOT_DIR="$GPU_CHECK_DEPS" PKG_CONFIG_LIBDIR="$GPU_CHECK_DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$GPU_CHECK_DEPS/usr/share/pkgconfig"
  export LD_LIBRARY_PATH="$GPU_CHECK_DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$PATH:$GPU_CHECK_DEPS/usr/bin"  # pkg-config, where the machine has none of its own
  deps=(-DCMAKE_INCLUDE_PATH="$GPU_CHECK_DEPS/usr/include" -DCMAKE_LIBRARY_PATH="$GPU_CHECK_DEPS/usr/lib/x86_64-linux-gnu"
        -DCOHORT_CHARTJS="$GPU_CHECK_DEPS/usr/share/javascript/chart.js/chart.min.js")
  prefix="$prefix;$GPU_CHECK_DEPS/usr"
fi
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCOHORT_PYTHON="$(command -v "$python")" "${deps[@]}" >>"$log" 2>&1 || fail "configure"
grep -q -- "-DUSE_C10D_NCCL" "$build/compile_commands.json" || fail "build flags: USE_C10D_NCCL is not defined (not a CUDA libtorch?)"
cmake --build "$build" -j "$jobs" --target cohort_cuda_tests cohort_process_tests init_probe gpt >>"$log" 2>&1 || fail "build"

results="$build/gpu-check"
rm -rf "$results"; mkdir -p "$results"
"$build/tests/cohort_cuda_tests" --gtest_output="json:$results/cuda.json" >>"$log" 2>&1
"$build/tests/cohort_process_tests" --gtest_filter='Init.Cuda*:Init.WithoutVariables*' --gtest_output="json:$results/init.json" >>"$log" 2>&1
# The GPT example on the GPU (issue 16): its corpus is Debian's fortunes where installed, else this
# checkout's docs (the throughput does not depend on the text).
if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$log"; then
  corpus=/usr/share/games/fortunes; [ -d "$corpus" ] || corpus=docs
  timeout 240 "$build/examples/gpt/gpt" --device cuda --preset gpt2-124m --batch 16 --steps 40 --timing-warmup 10 \
    --corpus "$corpus" --eval-windows 16 --sample-tokens 0 --log-every 10 --threads 4 >"$results/gpt.out" 2>>"$log"
  tail -n 1 "$results/gpt.out" > "$results/gpt.json"
  # The peer, side by side on the same GPU: the same model and step in Python with PyTorch's DDP
  # (bench/peer_gpt.py), with PyTorch's default AdamW on CUDA (foreach) and its fused one.
  for adamw in foreach fused; do
    flag=(); [ "$adamw" = fused ] && flag=(--fused-adamw)
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 timeout 180 "$python" bench/peer_gpt.py \
      --device cuda --preset gpt2-124m --batch 16 --steps 40 --timing-warmup 10 --corpus "$corpus" "${flag[@]}" \
      >"$results/peer_$adamw.out" 2>>"$log"
  done
  # Where the time goes: both sides again with each phase of a step timed (--phase-times; the
  # device synchronised at each boundary), 20 steps.
  timeout 120 "$build/examples/gpt/gpt" --device cuda --preset gpt2-124m --batch 16 --steps 20 --timing-warmup 5 \
    --corpus "$corpus" --eval-windows 1 --sample-tokens 0 --log-every 0 --threads 4 --phase-times \
    >"$results/gpt_phases.out" 2>>"$log"
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29534 timeout 120 "$python" bench/peer_gpt.py \
    --device cuda --preset gpt2-124m --batch 16 --steps 20 --timing-warmup 5 --corpus "$corpus" --phase-times \
    >"$results/peer_phases.out" 2>>"$log"
fi

"$python" - "$results" "$start" "$python" <<'PY'
import json, os, subprocess, sys, time
results, start, python = sys.argv[1], float(sys.argv[2]), sys.argv[3]
tests, passed, failed, skipped, cuda_skipped = {}, 0, 0, 0, 0
for name in ("cuda.json", "init.json"):
    path = os.path.join(results, name)
    if not os.path.exists(path):
        tests[name] = "crashed: no report"; failed += 1; continue
    for suite in json.load(open(path))["testsuites"]:
        for t in suite["testsuite"]:
            key = suite["name"] + "." + t["name"]
            if t.get("failures"):
                tests[key] = "failed: " + t["failures"][0]["failure"].splitlines()[0][:300]; failed += 1
            elif t.get("result") == "SKIPPED":
                tests[key] = "skipped"; skipped += 1; cuda_skipped += name == "cuda.json"
            else:
                tests[key] = "passed"; passed += 1
info = subprocess.run([python, "-c", "import torch, json; print(json.dumps({'torch': torch.__version__, "
                       "'cuda': torch.version.cuda, 'nccl': '.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None, "
                       "'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))"],
                      capture_output=True, text=True)
env = json.loads(info.stdout) if info.returncode == 0 else {"torch": None, "gpu": None}
gpt = None
if os.path.exists(os.path.join(results, "gpt.json")):
    try:
        g = json.loads(open(os.path.join(results, "gpt.json")).read())
        gpt = {k: g.get(k) for k in ("tokens_per_s", "mfu", "val_loss", "steps", "parameters")}
    except ValueError:
        gpt = {"error": open(os.path.join(results, "gpt.out"), errors="replace").read()[-300:]}
        failed += 1
peer = {}
for adamw in ("foreach", "fused"):
    path = os.path.join(results, f"peer_{adamw}.out")
    if os.path.exists(path):
        try:
            peer[adamw] = round(json.loads(open(path).read().strip().splitlines()[-1])["tokens_per_s"])
        except (ValueError, IndexError, KeyError):
            peer[adamw] = "failed: see gpu-check.log"
phases = {}
for side, name in (("cohort", "gpt_phases.out"), ("peer", "peer_phases.out")):
    path = os.path.join(results, name)
    if os.path.exists(path):
        try:
            phases[side] = {k: round(v, 2) for k, v in json.loads(open(path).read().strip().splitlines()[-1])["phase_ms"].items()}
        except (ValueError, IndexError, KeyError, AttributeError):
            phases[side] = "failed: see gpu-check.log"
if gpt and isinstance(gpt.get("tokens_per_s"), (int, float)):
    for adamw, tps in list(peer.items()):
        if isinstance(tps, (int, float)) and tps > 0:
            peer[f"cohort_over_{adamw}"] = round(gpt["tokens_per_s"] / tps, 3)
# With a GPU every CUDA test must run; without one they skip (and init's error test runs instead).
print(json.dumps({"ok": failed == 0 and (env.get("gpu") is None or cuda_skipped == 0), **env,
                  "passed": passed, "failed": failed, "skipped": skipped, "gpt": gpt, "peer_gpt": peer or None, "phase_ms": phases or None,
                  "seconds": round(time.time() - start, 1), "tests": tests}))
PY
