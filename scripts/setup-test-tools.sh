#!/usr/bin/env bash
# Installs what only the tests need, beyond scripts/setup.sh (idempotent): a real browser and a
# real Prometheus for the monitoring tests, and Python's playwright (its wheel carries the
# playwright-core driver and the Node.js that runs tests/e2e/*.js; no npm, no downloaded browser).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  chromium    # the real browser the dashboard tests drive (headless)
  prometheus  # the real Prometheus server that scrapes /metrics in the tests
  curl        # HTTP requests from the shell tests (token refused, /metrics)
  python3-venv  # the venv that holds playwright (scripts/make-venv.sh)
  doxygen       # the API reference of the public headers, undocumented names fail (scripts/api-docs.sh)
  dpkg-dev      # dpkg-shlibdeps: the .deb's library dependencies (cpack, scripts/check-downstream.sh)
  clang-14 libfuzzer-14-dev  # libFuzzer with ASan/UBSan: the parsers' fuzz harnesses (fuzz/, bench/fuzz.sh)
  sentencepiece  # spm_encode: the reference `cohort data prepare`'s tokens are checked against (tests/unit/data)
  nginx          # the real web server remote data sets are read from in the tests and bench/data/data_http.sh (range requests)
)
bash scripts/apt-install-missing.sh setup-test-tools "${packages[@]}"

# Pinned by requirements/test-tools.txt; tests/e2e/node.sh finds it in the same place.
bash scripts/make-venv.sh requirements/test-tools.txt venv-test-tools >/dev/null
