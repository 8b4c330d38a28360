#!/usr/bin/env bash
# Checkpoint speed (issue 4): synchronous save against dd conv=fsync of the same bytes to the same
# disk, restore, and the time an asynchronous save blocks training. About 1 GiB of state by default.
# Usage: bench/checkpoint_io.sh [PARAM_MIB (default 512: 1 GiB of state)] [ROUNDS (3)] [DIR (/tmp/...)]
# Needs a build: bash scripts/setup.sh (or ninja -C build checkpoint_io).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bench/checkpoint_io
[ -x "$bin" ] || { echo "checkpoint_io: build first (ninja -C build checkpoint_io)" >&2; exit 2; }
echo "machine: $(nproc) cores, $(uname -r); disk of ${3:-/tmp}: $(df -h --output=source,fstype,size "${3:-/tmp}" | tail -1)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$bin" --param-mb "${1:-512}" --rounds "${2:-3}" --dir "${3:-/tmp}/cohort_checkpoint_bench"
