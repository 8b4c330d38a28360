#!/usr/bin/env bash
# gpu-deps.sh [DIR]: copies the Debian packages cohort builds with (headers, libraries, CMake and
# pkg-config files; no libtorch) into DIR (default .gpu-deps, git-ignored) laid out as under /, for
# a GPU machine that reaches no package registry: carry DIR there and run
# `GPU_CHECK_DEPS=$PWD/.gpu-deps scripts/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu-deps}"
COHORT_SETUP_NO_BUILD=1 bash scripts/setup.sh
rm -rf "$dir"; mkdir -p "$dir"
for p in nlohmann-json3-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libxxhash-dev libxxhash0 \
         libsentencepiece-dev libsentencepiece0 libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libgtest-dev libgloo-dev zlib1g-dev libjs-chart.js libssl-dev libssl3 \
         pkgconf pkgconf-bin libpkgconf3; do
  dpkg -L "$p" 2>/dev/null | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
    cp -P --parents "$f" "$dir"  # -P keeps links; -a fails here setting the parents' times (overlayfs)
  done
done
du -sh "$dir"
