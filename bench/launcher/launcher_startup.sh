#!/usr/bin/env bash
# Launcher start-up, cohort run vs torchrun (issue 3): the time from invoking the launcher until
# every worker of a trivial program has joined the process group (init + barrier done), measured
# as max(worker's "joined <ns>" wall-clock stamp) - (stamp taken just before the launcher starts).
#   cohort:   build/tools/cohort run --nproc-per-node N -- build/bench/startup_probe      (C++, cohort::init)
#   torchrun: python3 -m torch.distributed.run --nproc_per_node N --redirects 1 --tee 1 bench/launcher/startup_probe.py
# Runs alternate between the two so that machine noise hits both; prints each median and the ratio.
# Also prints the launcher's own share: `cohort run` of /bin/true (no torch), start to exit.
# Usage: [COHORT_BUILD=build] [PEER_PYTHON=python] bench/launcher/launcher_startup.sh [REPETITIONS (default 7)] [WORKER COUNTS (default "2 4")]
# Needs a build (bash scripts/setup.sh; ninja -C build startup_probe) and python3-torch.
# Against torchrun 2.x on the same libtorch:
#   COHORT_BUILD=build-torch2 PEER_PYTHON=~/.cache/cohort/venv-torch2/bin/python bench/launcher/launcher_startup.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-7}
counts=${2:-"2 4"}
build=${COHORT_BUILD:-build}
py=${PEER_PYTHON:-/usr/bin/python3}
cohort=$build/tools/cohort
probe=${STARTUP_PROBE:-$build/bench/startup_probe}  # override to measure a variant
[ -x "$cohort" ] && [ -x "$probe" ] || { echo "launcher_startup: build first (ninja -C $build cohort_cli startup_probe)" >&2; exit 2; }
# torchrun of torch 1.13 fails under Python 3.11 unless its workers' output is redirected; 2.x's runs as users start it.
torchrun_io=(); [ "$("$py" -c 'import torch; print(torch.__version__.split(".")[0])')" = 1 ] && torchrun_io=(--redirects 1 --tee 1)

free_port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# Prints milliseconds from start until the last worker joined; fails when not all N joined.
measure() {
  local n=$1; shift
  local out start
  start=$(date +%s%N)
  out=$("$@" 2>&1) || { echo "launcher_startup: run failed: $*" >&2; echo "$out" | tail -5 >&2; return 1; }
  /usr/bin/python3 - "$start" "$n" "$out" <<'PY'
import re, sys
start, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
stamps = [int(s) for s in re.findall(r"joined (\d+)", out)]
if len(stamps) != n:
    sys.exit(f"launcher_startup: expected {n} joined lines, got {len(stamps)}")
print(f"{(max(stamps) - start) / 1e6:.1f}")
PY
}

echo "launcher start-up: time until all workers joined the process group (ms), $reps repetitions"
echo "machine: $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg); torchrun of torch $("$py" -c 'import torch; print(torch.__version__)')"
for n in $counts; do
  c_times=(); t_times=(); overhead=()
  for ((i = 0; i < reps; i++)); do
    c_times+=("$(measure "$n" "$cohort" run --nproc-per-node "$n" --master-port "$(free_port)" -- "$probe")")
    t_times+=("$(measure "$n" "$py" -m torch.distributed.run --nproc_per_node "$n" --master_port "$(free_port)" \
      "${torchrun_io[@]}" bench/launcher/startup_probe.py)")
    s=$(date +%s%N); "$cohort" run --nproc-per-node "$n" -- /bin/true; e=$(date +%s%N)
    overhead+=("$(( (e - s) / 1000 ))")
  done
  /usr/bin/python3 - "$n" "${c_times[*]}" "${t_times[*]}" "${overhead[*]}" <<'PY'
import statistics, sys
n = sys.argv[1]
c, t, o = ([float(x) for x in a.split()] for a in sys.argv[2:5])
mc, mt = statistics.median(c), statistics.median(t)
print(f"{n} workers: cohort run median {mc:.0f} ms (min {min(c):.0f}, max {max(c):.0f}) | "
      f"torchrun median {mt:.0f} ms (min {min(t):.0f}, max {max(t):.0f}) | torchrun / cohort = {mt / mc:.1f}x")
print(f"   the launcher alone ({n} x /bin/true, start to exit): median {statistics.median(o) / 1000:.1f} ms")
PY
done
