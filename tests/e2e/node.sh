#!/usr/bin/env bash
# node.sh SCRIPT.js: runs a browser or Prometheus test with the Node.js and playwright-core that
# Python's playwright wheel carries (scripts/setup-test-tools.sh installs it into a cached venv),
# telling the script where playwright-core is through PLAYWRIGHT_CORE. Without that venv the test
# is skipped (exit 77), or fails under COHORT_E2E_REQUIRED=1 as scripts/test.sh and CI run it.
set -euo pipefail
venv="${COHORT_TEST_TOOLS_VENV:-${COHORT_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/cohort}/venv-test-tools}"
driver=""
for d in "$venv"/lib/python3*/site-packages/playwright/driver; do
  [ -x "$d/node" ] && [ -f "$d/package/package.json" ] && driver="$d"
done
if [ -z "$driver" ]; then
  why="no playwright driver under $venv: run scripts/setup-test-tools.sh (pip playwright)"
  if [ "${COHORT_E2E_REQUIRED:-}" = 1 ]; then
    echo "FAILED: $why (COHORT_E2E_REQUIRED=1)"; exit 1
  fi
  echo "SKIPPED: $why"; exit 77
fi
export PLAYWRIGHT_CORE="$driver/package"
exec "$driver/node" "$@"
