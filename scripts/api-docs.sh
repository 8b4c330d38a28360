#!/usr/bin/env bash
# api-docs.sh [BUILD_DIR]: the API reference of the public headers with Doxygen (Debian's package),
# into BUILD_DIR/api/html (default build/). Fails on any Doxygen warning: an undocumented public
# name, or a documentation error (docs/api/Doxyfile). CI runs it (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
if ! command -v doxygen >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q --no-install-recommends doxygen >/dev/null
fi
[ -f "$build/include/cohort/version.h" ] || { echo "api-docs: $build/include/cohort/version.h missing: configure cohort first" >&2; exit 1; }
rm -rf "$build/api"
mkdir -p "$build/api"
COHORT_API_OUT="$build/api" COHORT_VERSION_HEADER="$build/include/cohort/version.h" doxygen docs/api/Doxyfile
echo "api-docs: $build/api/html/index.html"
