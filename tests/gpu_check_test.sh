#!/usr/bin/env bash
# The CPU-side parts of scripts/gpu-check.sh, on a machine without a GPU.
#   gpu_check_test.sh cuda BUILD PYTHON: against a CUDA libtorch's build (USE_C10D_NCCL): one JSON
#     line, ok, "gpu": null, every CUDA test skipped (with its reason), init's CUDA error test passed.
#   gpu_check_test.sh cpu PYTHON: with a libtorch without CUDA: one JSON line naming the failed
#     build-flag check, exit 1, before anything is built.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="$1"
out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT
if [ "$mode" = cuda ]; then
  OUT="$out" GPU_CHECK_BUILD="$2" GPU_CHECK_PYTHON="$3" bash "$root/scripts/gpu-check.sh" >"$out/stdout" 2>"$out/stderr"
else
  OUT="$out" GPU_CHECK_BUILD="$out/build" GPU_CHECK_PYTHON="$2" bash "$root/scripts/gpu-check.sh" >"$out/stdout" 2>"$out/stderr"
fi
rc=$?
cat "$out/stdout" "$out/stderr"
python3 - "$mode" "$rc" "$out/stdout" <<'PY'
import json, sys
mode, rc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(path).read().splitlines()
assert len(lines) == 1, f"one JSON line expected, got {len(lines)}"
r = json.loads(lines[0])
if mode == "cuda":
    assert rc == 0 and r["ok"] is True, r
    assert r["gpu"] is None and r["torch"].startswith("2."), r
    cuda = {k: v for k, v in r["tests"].items() if k.startswith(("Cuda", "Levels/CudaSharded"))}
    assert len(cuda) == 7 and all(v == "skipped" for v in cuda.values()), cuda
    assert r["tests"]["Init.CudaWithoutCudaIsAOneLineErrorOnEveryRank"] == "passed", r["tests"]
else:
    assert rc == 1 and r["ok"] is False and r["failed"].startswith("build flags: USE_C10D_NCCL"), r
print("gpu-check " + mode + ": ok")
PY
