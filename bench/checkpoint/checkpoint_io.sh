#!/usr/bin/env bash
# Checkpoint speed (issues 4 and 15): synchronous save against dd conv=fsync of the same bytes to the
# same disk, restore, and the time an asynchronous save blocks training; side by side with
# torch.distributed.checkpoint (bench/checkpoint/peer_dcp.py: dcp.save, dcp.load, dcp.async_save) on the same
# state when PEER_PYTHON's torch is 2.x. About 1 GiB of state by default.
# Usage: [COHORT_BUILD=build] [PEER_PYTHON=python] bench/checkpoint/checkpoint_io.sh [PARAM_MIB (512)] [ROUNDS (3)] [DIR (/tmp)]
# Each side runs ROUNDS rounds in one process, twice, alternating (cohort, cohort through the page
# cache, DCP, and again), so noise hits all; medians over all rounds, the asynchronous stall without each process's first
# save (which allocates its staging memory on both sides; printed apart).
# Same libtorch on both sides: COHORT_BUILD=build-torch2 PEER_PYTHON=~/.cache/cohort/venv-torch2/bin/python.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${COHORT_BUILD:-build}
bin=$build/bench/checkpoint_io
py=${PEER_PYTHON:-/usr/bin/python3}
mib=${1:-512}
rounds=${2:-3}
dir=${3:-/tmp}
[ -x "$bin" ] || { echo "checkpoint_io: build first (ninja -C $build checkpoint_io)" >&2; exit 2; }
dcp=$("$py" -c 'import torch; print(int(torch.__version__.split(".")[0]) >= 2)')
echo "machine: $(nproc) cores, $(uname -r); disk of $dir: $(df -h --output=source,fstype,size "$dir" | tail -1)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Restores read cold files on both sides (the page cache dropped first), as after a restart on
# another machine: cohort writes with O_DIRECT, which leaves nothing in the cache, and DCP through it.
cold=(); if [ -w /proc/sys/vm/drop_caches ]; then cold=(--cold-restore); else echo "warning: not root: restores read whatever the page cache holds (cohort's files: nothing)"; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pass in 1 2; do
  "$bin" --param-mb "$mib" --rounds "$rounds" "${cold[@]}" --dir "$dir/cohort_checkpoint_bench" | grep '^{' | sed "s/^{/{\"side\":\"cohort\",\"pass\":$pass,/" | tee -a "$out"
  # The same through the page cache (no O_DIRECT), to show what the direct writes are worth.
  COHORT_CKPT_DIRECT_IO=0 "$bin" --param-mb "$mib" --rounds "$rounds" "${cold[@]}" --dir "$dir/cohort_checkpoint_bench" |
    grep '^{' | sed "s/^{/{\"side\":\"cached\",\"pass\":$pass,/" | tee -a "$out"
  if [ "$dcp" = True ]; then
    "$py" bench/checkpoint/peer_dcp.py --param-mb "$mib" --rounds "$rounds" "${cold[@]}" --dir "$dir/cohort_checkpoint_bench_dcp" | tee -a "$out"
  fi
done
"$py" - "$out" "${cold:+cold}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda side, k, steady=False: statistics.median(r[k] for r in rows if r["side"] == side and (not steady or r["round"] > 0))
first = lambda side: statistics.median(r["async_blocked_s"] for r in rows if r["side"] == side and r["round"] == 0)
gib = rows[0]["gib"]
cold = sys.argv[2] == "cold"
print(f"\nstate {gib:.2f} GiB (medians)")
print(f"  dd conv=fsync               {med('cohort', 'dd_s'):6.2f} s  {gib / med('cohort', 'dd_s'):5.2f} GiB/s")
sides = ["cohort", "cached"] + (["dcp"] if any(r["side"] == "dcp" for r in rows) else [])
for s in sides:
    print(f"  {s:6} save (sync)          {med(s, 'save_s'):6.2f} s  {gib / med(s, 'save_s'):5.2f} GiB/s = {100 * med('cohort', 'dd_s') / med(s, 'save_s'):.0f}% of dd")
    print(f"  {s:6} restore              {med(s, 'restore_s'):6.2f} s  {gib / med(s, 'restore_s'):5.2f} GiB/s ({'cold' if cold else 'files in the page cache'})")
    print(f"  {s:6} async: blocked       {med(s, 'async_blocked_s', True):6.3f} s  = {100 * med(s, 'async_blocked_s', True) / med(s, 'save_s'):.1f}% of its sync save (first of a process: {first(s):.3f} s)")
    print(f"  {s:6} async: until done    {med(s, 'async_total_s'):6.2f} s")
print("  (cached: cohort with COHORT_CKPT_DIRECT_IO=0, through the page cache)")
print(f"cohort with / without O_DIRECT: sync save {med('cached', 'save_s') / med('cohort', 'save_s'):.2f}x faster")
if "dcp" in sides:
    print(f"DCP / cohort: sync save {med('dcp', 'save_s') / med('cohort', 'save_s'):.2f}x the time, "
          f"restore {med('dcp', 'restore_s') / med('cohort', 'restore_s'):.2f}x, "
          f"async stall {med('dcp', 'async_blocked_s', True) / med('cohort', 'async_blocked_s', True):.2f}x, "
          f"async until done {med('dcp', 'async_total_s') / med('cohort', 'async_total_s'):.2f}x "
          f"(torch {next(r['torch'] for r in rows if r['side'] == 'dcp')})")
PY
