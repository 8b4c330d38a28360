#!/usr/bin/env bash
# Builds cohort against libtorch 2.x with CUDA (scripts/build-torch2.sh) and runs the test suite on
# that build. CUDA tests skip with their reason on a machine without a GPU (docs/torch2.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-tools.sh
bash scripts/build-torch2.sh
# Two tests at a time, as scripts/test.sh says why; without the tests labelled version-free (the
# browser pages, Prometheus, the simulator: no torch in what they test; tests/CMakeLists.txt).
COHORT_E2E_REQUIRED=1 ctest --test-dir build-torch2 --output-on-failure --timeout 600 --parallel "${COHORT_TEST_JOBS:-2}" \
  -LE version-free "$@"
