#!/usr/bin/env bash
# data_read.sh [GIB] [SMALL_MIB]: ShardedDataset against dd on cold local shards (issue 46), on a
# generated data set of GIB GiB (default 2) and, for its memory, one of SMALL_MIB MiB (default 10):
# one JSON line each (build/bench/data_read; bench/data/data_read.cpp says what is measured). The
# data sets go under ${DATA_BENCH_DIR:-/var/tmp/cohort-data-bench} and are removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
gib="${1:-2}" small_mib="${2:-10}"
root="${DATA_BENCH_DIR:-/var/tmp/cohort-data-bench}"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"
echo "data_read: large ($gib GiB)"
build/bench/data_read --dir "$root/large" --gib "$gib"
echo "data_read: small ($small_mib MiB)"
build/bench/data_read --dir "$root/small" --gib "$(awk -v m="$small_mib" 'BEGIN { print m / 1024 }')" --global-batch 8
