#!/usr/bin/env bash
# The second build: cohort against libtorch 2.x with CUDA and NCCL, from the PyTorch wheel pinned in
# requirements/torch2.txt (scripts/setup-torch2.sh), into build-torch2/. Needs scripts/setup.sh's
# Debian packages (run first here) and the CUDA toolkit (nvcc; Torch's CMake config of a CUDA build
# requires it, though cohort compiles no CUDA code). Gloo's headers come from Debian's libgloo-dev
# (docs/torch2.md says why that is sound). Idempotent; rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
COHORT_SETUP_NO_BUILD=1 bash scripts/setup.sh
venv="$(bash scripts/setup-torch2.sh | tail -1)"
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && PATH="$d:$PATH" && break; done
fi
command -v nvcc >/dev/null 2>&1 || { echo "build-torch2: nvcc not found: this build needs the CUDA toolkit" >&2; exit 1; }
prefix="$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# Without the simulator's page (COHORT_EMXX=OFF; its em++ build took ~2.5 min of CI): it has no torch
# in it, and its browser test runs on the first build only (scripts/test-torch2.sh).
cmake -S . -B build-torch2 -G Ninja -DCMAKE_BUILD_TYPE="${COHORT_BUILD_TYPE:-Release}" -DCMAKE_UNITY_BUILD="${COHORT_UNITY_BUILD:-ON}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCOHORT_PYTHON="$venv/bin/python" -DCOHORT_EMXX="${COHORT_EMXX:-OFF}" >/dev/null
cmake --build build-torch2
