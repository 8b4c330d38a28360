#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test-tools.sh
ctest --test-dir build --output-on-failure --timeout 600 "$@"
