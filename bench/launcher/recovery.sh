#!/usr/bin/env bash
# Recovery time (issue 5): from a worker's SIGKILL to the first completed training step after the
# restart, cohort run vs torchrun, same CNN on Fashion-MNIST, 2 ranks, checkpoints every 10 steps,
# each resuming from its own checkpoint (cohort: the example's Checkpointer; torchrun:
# bench/launcher/peer_recovery.py with torch.save). cohort runs three ways: plain, with --warm-spares, and
# with warm spares and in-memory snapshots every step (--snapshot-every 1, issue 19), which also
# reports the steps each restart went back (from the run's events.jsonl), and a fourth way where
# the survivors keep running (--keep-survivors with warm spares and snapshots: only the killed
# worker is replaced). Runs alternate; prints each median and the ratios. With GOODPUT=1 it also
# runs cohort (GOODPUT_KIND: cohort-survive by default, or cohort-survive-nofork, cohort-snap, cohort-warm, cohort) with a
# SIGKILL every GOODPUT_EVERY_S seconds (default 30) and reports goodput (useful steps per second
# with failures / without).
# Usage: bench/launcher/recovery.sh [REPETITIONS (default 5; 0: goodput only)]
#        GOODPUT=1 GOODPUT_EVERY_S=10 GOODPUT_PAIRS=3 bench/launcher/recovery.sh 0
#        GOODPUT=1 GOODPUT_KIND="cohort-survive cohort-survive-nofork" ...: forked spares or new ones
# Needs a build (bash scripts/setup.sh) and python3-torch.
# Against torchrun 2.x on the same libtorch:
#   COHORT_BUILD=build-torch2 PEER_PYTHON=~/.cache/cohort/venv-torch2/bin/python bench/launcher/recovery.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${1:-5}
build=${COHORT_BUILD:-build}
py=${PEER_PYTHON:-/usr/bin/python3}
cohort=$build/tools/cohort
example=$build/examples/fashion_mnist/fashion_mnist
# torchrun of torch 1.13 fails under Python 3.11 unless its workers' output is redirected; 2.x's runs as users start it.
# torchrun 2.x's peer saves with torch.distributed.checkpoint (DCP), 1.13's with torch.save.
torchrun_io=(); peer_ckpt=(--dcp)
[ "$("$py" -c 'import torch; print(torch.__version__.split(".")[0])')" = 1 ] && torchrun_io=(--redirects 1 --tee 1) && peer_ckpt=()
[ -x "$cohort" ] && [ -x "$example" ] || { echo "recovery: build first (bash scripts/setup.sh)" >&2; exit 2; }
work=$(mktemp -d /tmp/cohort_recovery.XXXXXX)
trap 'pkill -9 -f "$work" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

free_port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# start KIND DIR STEPS: the job in the background, its output in DIR/log; sets job_pid, pattern.
start() {
  local kind=$1 dir=$2 steps=$3
  mkdir -p "$dir/ck"
  : >"$dir/log"  # exists before the job's own redirection does: first_steps may look at once
  if [ "$kind" != torchrun ]; then
    local warm=() snap=()
    [ "$kind" != cohort ] && warm=(--warm-spares)
    [ "$kind" = cohort-snap ] || [[ "$kind" == cohort-survive* ]] && snap=(--snapshot-every 1)
    [[ "$kind" == cohort-survive* ]] && warm+=(--keep-survivors)
    [ "$kind" = cohort-survive-nofork ] && warm+=(--no-fork-spares)
    "$cohort" run --nproc-per-node 2 --threads-per-proc 1 --max-restarts 100 "${warm[@]}" --no-dashboard \
      --run-dir "$dir/run" -- "$example" --no-eval --threads 1 \
      --log-every 0 --max-steps "$steps" --ckpt-dir "$dir/ck" --ckpt-every 10 "${snap[@]}" --report-first-step >"$dir/log" 2>&1 &
    pattern="fashion_mnist.*--ckpt-dir $dir/ck"
  else
    # torchrun looks at its workers every --monitor_interval seconds (default 5, which adds a
    # random 0-5 s to its recovery); the peer gets its best, 0.1 s, unless TORCHRUN_MONITOR_S says otherwise.
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" -m torch.distributed.run --nproc_per_node 2 \
      --monitor_interval "${TORCHRUN_MONITOR_S:-0.1}" --max_restarts 100 "${torchrun_io[@]}" --master_port "$(free_port)" bench/launcher/peer_recovery.py \
      --ckpt-dir "$dir/ck" --max-steps "$steps" --ckpt-every 10 "${peer_ckpt[@]}" >"$dir/log" 2>&1 &
    pattern="-u bench/launcher/peer_recovery.py --ckpt-dir $dir/ck"
  fi
  job_pid=$!
}

# steps_lost DIR: for each restore in the run's event log, the newest step any rank reported
# before it less the step restored (space-separated).
steps_lost() {
  /usr/bin/python3 - "$1/run/events.jsonl" <<'PY'
import json, sys
newest, lost = 0, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("type") == "metrics": newest = max(newest, e["step"])
    if e.get("kind") == "checkpoint_restored": lost.append(newest - e["step"])
print(" ".join(map(str, lost)))
PY
}

# first_steps DIR: the first-step timestamps of every start, in order.
first_steps() { grep -o 'first_step_unix_ns [0-9]*' "$1/log" | awk '{print $2}'; }

# restart_count PID: the COHORT_RESTART_COUNT the process was started with (0 when unset).
restart_count() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^COHORT_RESTART_COUNT=//p' | grep . || echo 0; }

# kill_one: SIGKILL one training worker; prints the kill's wall-clock time in ns. Warm spares
# (--warm-spares) match the pattern too, but were started for the next round: a worker is a
# process of the pattern, other than the launcher, with the lowest restart count. With
# --keep-survivors the spares are the same round's: a worker is one that mapped the shared-memory
# allreduce's segment (/dev/shm/cohort-<pid>-<n>), which a spare waiting in init() has not.
kill_one() {
  local pid= p n low=
  if [[ "${kind:-}" == cohort-survive* ]]; then
    for p in $(pgrep -f -- "$pattern" | grep -vx "$job_pid" || true); do
      grep -qE '/dev/shm/cohort-[0-9]+-[0-9]+' "/proc/$p/maps" 2>/dev/null && pid=$p
    done
    [ -n "$pid" ] || { echo "recovery: no worker found" >&2; return 1; }
    date +%s%N
    kill -9 "$pid"
    return 0
  fi
  for p in $(pgrep -f -- "$pattern" | grep -vx "$job_pid" || true); do
    n=$(restart_count "$p")
    if [ -z "$low" ] || [ "$n" -lt "$low" ]; then low=$n; pid=$p; elif [ "$n" -eq "$low" ]; then pid=$p; fi
  done
  [ -n "$pid" ] || { echo "recovery: no worker found" >&2; return 1; }
  date +%s%N
  kill -9 "$pid"
}

# wait_for_starts DIR N: until N starts have completed a step (bounded).
wait_for_starts() {
  for _ in $(seq 600); do
    [ "$(first_steps "$1" | wc -l)" -ge "$2" ] && return 0
    kill -0 "$job_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "recovery: the job did not restart; its log:" >&2; tail -20 "$1/log" >&2; return 1
}

# One measurement: start, let it train KILL_AFTER_S (default 8 s: a job in its steady state, where
# --warm-spares has its spares waiting; they start once the round trains and take a few seconds to
# load while it does), kill a worker, time until the restarted job's first step.
recovery_ms() {
  local kind=$1 dir="$work/$1-$2" t_kill
  start "$kind" "$dir" 100000
  wait_for_starts "$dir" 1
  sleep "${KILL_AFTER_S:-8}"
  t_kill=$(kill_one)
  local restarted=1
  wait_for_starts "$dir" 2 || restarted=0
  kill -TERM "$job_pid" 2>/dev/null || true; wait "$job_pid" 2>/dev/null || true
  pkill -9 -f -- "$pattern" 2>/dev/null || true
  # A job that did not train again within the wait is counted as such, not as a time.
  [ "$restarted" = 1 ] && echo $(( ($(first_steps "$dir" | sed -n 2p) - t_kill) / 1000000 )) || echo failed
}

if [ "$reps" -gt 0 ]; then
echo "recovery time: SIGKILL of one worker -> first completed step after the restart (ms), $reps repetitions"
echo "machine: $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg); torchrun of torch $("$py" -c 'import torch; print(torch.__version__)')"
k=(); s=(); w=(); c=(); t=(); ls=(); lk=()
for ((i = 0; i < reps; i++)); do
  k+=("$(recovery_ms cohort-survive "$i")")
  lk+=("$(steps_lost "$work/cohort-survive-$i")")
  s+=("$(recovery_ms cohort-snap "$i")")
  w+=("$(recovery_ms cohort-warm "$i")")
  c+=("$(recovery_ms cohort "$i")")
  t+=("$(recovery_ms torchrun "$i")")
  ls+=("$(steps_lost "$work/cohort-snap-$i")")
  echo "  run $i: cohort --keep-survivors ${k[-1]} ms (went back ${lk[-1]} steps)," \
       "cohort --warm-spares --snapshot-every 1 ${s[-1]} ms (went back ${ls[-1]} steps)," \
       "cohort --warm-spares ${w[-1]} ms (went back $(steps_lost "$work/cohort-warm-$i") steps), cohort ${c[-1]} ms, torchrun ${t[-1]} ms"
done
/usr/bin/python3 - "${s[*]}" "${w[*]}" "${c[*]}" "${t[*]}" "${ls[*]}" "${k[*]}" "${lk[*]}" <<'PY'
import statistics, sys
failed = {}
def times(name, text):  # the runs that trained again; how many did not
    values = [int(x) for x in text.split() if x != "failed"]
    if len(values) < len(text.split()):
        failed[name] = len(text.split()) - len(values)
    return values or [float("nan")]
s, w, c, t, k = (times(n, a) for n, a in zip(("snapshots", "warm spares", "cohort", "torchrun", "keep-survivors"),
                                             sys.argv[1:5] + sys.argv[6:7]))
lost, lost_k = ([int(x) for x in a.split()] or [0] for a in (sys.argv[5], sys.argv[7]))
ms, mw, mc, mt, mk = (statistics.median(x) for x in (s, w, c, t, k))
for name, n in failed.items():
    print(f"{name}: {n} run(s) did not train again within the wait (not in the median)")
print(f"median: cohort --keep-survivors {mk:.0f} ms (torchrun / it = {mt / mk:.1f}x), steps lost at most {max(lost_k)}")
print(f"median: cohort --warm-spares --snapshot-every 1 {ms:.0f} ms, cohort --warm-spares {mw:.0f} ms, cohort {mc:.0f} ms, torchrun {mt:.0f} ms")
print(f"torchrun / cohort with snapshots = {mt / ms:.1f}x, torchrun / cohort --warm-spares = {mt / mw:.1f}x, torchrun / cohort = {mt / mc:.1f}x")
print(f"steps lost per failure with snapshots: at most {max(lost)} (of {len(lost)} failures)")
PY
fi

if [ "${GOODPUT:-0}" = 1 ]; then
  steps=${GOODPUT_STEPS:-1500}
  kinds=(${GOODPUT_KIND:-cohort-survive})
  every=${GOODPUT_EVERY_S:-30}
  # GOODPUT_PAIRS rounds, each a clean run (of the first kind) and a faulty run of each kind, in
  # turn. The wall-time ratio of two runs is quoted, but the machine drifts by up to 10 % between
  # runs; goodput_from_events.py compares each run with itself (see there).
  pairs=${GOODPUT_PAIRS:-1}; ratios=()
  for ((p = 0; p < pairs; p++)); do
    kind=${kinds[0]}; dir="$work/clean-$p"; start "$kind" "$dir" "$steps"; s=$(date +%s%N); wait "$job_pid"
    clean=$(( ($(date +%s%N) - s) / 1000000 ))
    for kind in "${kinds[@]}"; do
      dir="$work/faulty-$kind-$p"; start "$kind" "$dir" "$steps"; s=$(date +%s%N); kills=0
      while kill -0 "$job_pid" 2>/dev/null; do
        for _ in $(seq $((every * 10))); do kill -0 "$job_pid" 2>/dev/null && sleep 0.1; done
        kill -0 "$job_pid" 2>/dev/null && kill_one >/dev/null && kills=$((kills + 1))
      done
      wait "$job_pid" || { echo "recovery: the faulty run failed" >&2; tail -20 "$dir/log" >&2; exit 1; }
      faulty=$(( ($(date +%s%N) - s) / 1000000 ))
      ratios+=("$(awk -v a="$clean" -v b="$faulty" 'BEGIN{printf "%.4f", a/b}')")
      echo "goodput ($kind, round $p): $steps steps in $clean ms without failures, $faulty ms with $kills SIGKILLs" \
           "(one every $every s): wall-time ratio $(awk -v r="${ratios[-1]}" 'BEGIN{printf "%.1f%%", 100*r}')"
      /usr/bin/python3 bench/launcher/goodput_from_events.py "$work/clean-$p/run/events.jsonl" "$dir/run/events.jsonl" "$every" |
        sed 's/^/  /'
    done
  done
fi
