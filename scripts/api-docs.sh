#!/usr/bin/env bash
# api-docs.sh [BUILD_DIR]: the API reference of the public headers with Doxygen (Debian's package),
# into BUILD_DIR/api/html (default build/). Fails on any Doxygen warning: an undocumented public
# name, or a documentation error (docs/api/Doxyfile); and on internal names in the public headers
# (below). CI runs it (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
if ! command -v doxygen >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -q --no-install-recommends doxygen >/dev/null
fi
[ -f "$build/include/cohort/version.h" ] || { echo "api-docs: $build/include/cohort/version.h missing: configure cohort first" >&2; exit 1; }
# Nothing internal in the public headers: cohort::detail there holds forward declarations only
# (the opaque names of the implementation), and a public header includes only public headers.
internal="$(awk '
  /^namespace (cohort::)?detail \{/ { inside = 1; next }
  inside && /^\}/ { inside = 0; next }
  inside && !/^[ \t]*(class|struct) [A-Za-z_][A-Za-z_0-9]*;[ \t]*(\/\/.*)?$/ && !/^[ \t]*(\/\/.*)?$/ {
    print FILENAME ":" FNR ": more than a forward declaration in cohort::detail: " $0 }
  /^#include "/ && !/^#include "cohort\// { print FILENAME ":" FNR ": includes a header that is not public: " $0 }
' include/cohort/*.h)"
if [ -n "$internal" ]; then
  echo "$internal" >&2
  echo "api-docs: internal names in the public headers (docs/install.md, What is public)" >&2
  exit 1
fi
rm -rf "$build/api"
mkdir -p "$build/api"
COHORT_API_OUT="$build/api" COHORT_VERSION_HEADER="$build/include/cohort/version.h" doxygen docs/api/Doxyfile
echo "api-docs: $build/api/html/index.html"
