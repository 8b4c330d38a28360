#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Test tools first: the build's configure registers the browser tests only where node exists.
bash scripts/setup-test-tools.sh
bash scripts/setup.sh
# The browser and Prometheus tests fail, rather than skip, when a tool is missing.
COHORT_E2E_REQUIRED=1 ctest --test-dir build --output-on-failure --timeout 600 "$@"
