#!/usr/bin/env bash
# Installs what only the tests need, beyond scripts/setup.sh (idempotent): a real browser and a
# real Prometheus for the monitoring tests, and Playwright's driver from npm.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  chromium    # the real browser the dashboard tests drive (headless)
  prometheus  # the real Prometheus server that scrapes /metrics in the tests
  curl        # HTTP requests from the shell tests (token refused, /metrics)
)
# npm: Debian's package, unless a Node.js with its own npm is already installed (nodesource's
# nodejs ships npm and conflicts with Debian's npm package).
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-test-tools: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# playwright-core (no bundled browsers: it drives Debian's chromium), pinned by tests/e2e/package-lock.json.
if [ -f tests/e2e/package.json ] && [ ! -d tests/e2e/node_modules/playwright-core ]; then
  npm ci --prefix tests/e2e --no-audit --no-fund
fi
