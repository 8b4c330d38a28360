#!/usr/bin/env python3
"""bench/data/data_gpt.py LABEL RUN_DIR -- COMMAND...: runs one `cohort run ... -- gpt ... --phase-times`
job (COMMAND) for bench/data/data_gpt.sh and prints one JSON line about each rank:

  data_ms, step_ms    the step's "data" phase (the wait in batches.next(), summed over micro-steps)
                      and the sum of all its phases, ms per timed step (the example's phase_ms)
  data_share          data_ms / step_ms (issue 46: <= 1 %)
  peak_rss_mb         the rank's worker's VmHWM (/proc/PID/status; its rank from COHORT_RANK in
                      /proc/PID/environ), read every 0.2 s until it exits
  rss_first_mb, rss_last_mb, rss_max_mb
                      the monitor's rss_bytes in RUN_DIR/events.jsonl (one record per step): at the
                      first step after the timing warm-up, at the last step, and the largest
  rss_growth_mb       rss_last_mb - rss_first_mb: flat when it is near 0
"""
import json
import os
import re
import subprocess
import sys
import time


def descendants(root):
    """PIDs of every process below `root`, with their command names."""
    children, names = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(pid))
        names[int(pid)] = name
    out, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out[c] = names[c]
            todo.append(c)
    return out


def vm_hwm_kb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def rank_of(pid):
    try:
        for var in open(f"/proc/{pid}/environ", "rb").read().split(b"\0"):
            if var.startswith(b"COHORT_RANK="):
                return int(var.split(b"=", 1)[1])
    except OSError:
        pass
    return None


def main():
    label, run_dir, cmd = sys.argv[1], sys.argv[2], sys.argv[sys.argv.index("--") + 1:]
    warmup = 3
    if "--timing-warmup" in cmd:
        warmup = int(cmd[cmd.index("--timing-warmup") + 1])
    log = run_dir + ".log"  # the job's output
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    hwm = {}  # rank -> largest VmHWM seen (kB) of its worker
    while proc.poll() is None:
        for pid, name in descendants(proc.pid).items():
            if name.endswith("gpt") and name != "data_gpt.py":
                kb, rank = vm_hwm_kb(pid), rank_of(pid)
                if kb is not None and rank is not None:
                    hwm[rank] = max(hwm.get(rank, 0), kb)
        time.sleep(0.2)
    output = open(log, errors="replace").read()
    if proc.returncode != 0:
        sys.stderr.write(output)
        sys.exit(f"data_gpt: {label}: the job exited with {proc.returncode}")

    results = {}
    for line in output.splitlines():
        m = re.match(r"^(?:\[\d+\] )?(\{.*\})\s*$", line)  # a rank's result line
        if m and '"val_loss"' in m.group(1):
            r = json.loads(m.group(1))
            results[r["rank"]] = r
    rss = {}  # rank -> [(step, bytes)]
    with open(os.path.join(run_dir, "events.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("type") == "metrics" and "rss_bytes" in e:
                rss.setdefault(e["rank"], []).append((e["step"], e["rss_bytes"]))
    for rank in sorted(results):
        r, mb = results[rank], 1 / (1 << 20)
        phases = r.get("phase_ms") or {}
        step_ms = sum(phases.values())
        series = sorted(rss.get(rank, []))
        after = [b for s, b in series if s > warmup] or [b for _, b in series]
        out = {"run": label, "rank": rank, "steps": r["steps"], "tokens_per_s": round(r["tokens_per_s"], 1),
               "data_ms": round(phases.get("data", float("nan")), 3), "step_ms": round(step_ms, 2),
               "data_share": round(phases.get("data", float("nan")) / step_ms, 5) if step_ms else None,
               "peak_rss_mb": round(hwm[rank] / 1024, 1) if rank in hwm else None}
        if after:
            out.update({"rss_first_mb": round(after[0] * mb, 1), "rss_last_mb": round(after[-1] * mb, 1),
                        "rss_max_mb": round(max(after) * mb, 1), "rss_growth_mb": round((after[-1] - after[0]) * mb, 1)})
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
