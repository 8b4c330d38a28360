#!/usr/bin/env python3
"""Goodput of a run from its own events.jsonl, robust to the machine's drift between runs.

Two runs of the same job on this shared 2-core machine differ by up to 10 % in wall time without
any failure, so the ratio of two runs' wall times cannot separate 98 % from 95 %. Two measures
that compare a run with itself instead:
* efficiency: the useful steps (the newest step rank 0 completed less the first; a recomputed step
  counts once) times the run's own median step time, over the wall time between those two steps.
  Goodput = efficiency with failures / efficiency without.
* cost per failure: around each "replaced" event (from WINDOW_BEFORE_S before it to WINDOW_AFTER_S
  after), the wall time rank 0 took beyond its steps at the run's median step time: the gap until
  it trains again, the steps recomputed, slower steps while something else takes the CPU (a spare
  loading). Less the same excess in the windows of the same run that hold no failure (checkpoints,
  jitter). A failure every T seconds then leaves goodput 1 - cost / T.
Usage: goodput_from_events.py CLEAN_EVENTS FAULTY_EVENTS EVERY_S
"""
import json
import statistics
import sys

WINDOW_BEFORE_S, WINDOW_AFTER_S = 1.0, 4.0


def read(path):
    t_of, step_s, repairs = {}, [], []  # step -> when rank 0 first completed it; durations; repair times
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("type") == "event" and m.get("kind") == "replaced":
                repairs.append((m["t"], m.get("fields", m).get("spare", "?")))
            if m.get("type") != "metrics" or m.get("rank") != 0 or "step" not in m or "t" not in m:
                continue
            t_of.setdefault(m["step"], m["t"])
            if "step_s" in m:
                step_s.append(m["step_s"])
    points = sorted((t, s) for s, t in t_of.items())
    return points, statistics.median(step_s), repairs


def efficiency(points, median):
    (t0, s0), (t1, s1) = points[0], points[-1]
    return (s1 - s0) * median / (t1 - t0)


def excess(points, median, start, end):
    inside = [(t, s) for t, s in points if start <= t <= end]
    if len(inside) < 2:
        return None
    (t0, s0), (t1, s1) = inside[0], inside[-1]
    return (t1 - t0) - max(0, s1 - s0) * median


def main():
    clean, faulty, every = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    e_clean, e_faulty = efficiency(clean[0], clean[1]), efficiency(faulty[0], faulty[1])
    width = WINDOW_BEFORE_S + WINDOW_AFTER_S
    points, median, repairs = faulty
    failure_windows = [(r - WINDOW_BEFORE_S, r + WINDOW_AFTER_S) for r, _ in repairs]
    quiet = [excess(points, median, t, t + width) for t in window_starts(points[0][0] + 5, points[-1][0] - width, 0.5)
             if all(t + width < a or t > b for a, b in failure_windows)]
    quiet = [x for x in quiet if x is not None]
    base = statistics.mean(quiet) if quiet else 0.0
    costs = [(excess(points, median, a, b), kind) for (a, b), (_, kind) in zip(failure_windows, repairs)]
    costs = [(c - base, kind) for c, kind in costs if c is not None]
    print(f"efficiency without failures {e_clean:.4f}, with {len(repairs)} failures {e_faulty:.4f}: "
          f"goodput {100 * e_faulty / e_clean:.1f}%")
    if costs:
        cost = statistics.mean(c for c, _ in costs)
        print(f"cost per failure {cost:.3f} s (each, by what replaced the worker: "
              f"{', '.join(f'{c:.2f} {k}' for c, k in costs)}; {len(quiet)} quiet {width:.0f} s windows: {base:.3f} s): "
              f"a failure every {every:.0f} s leaves goodput {100 * (1 - cost / every):.1f}%")


def window_starts(a, b, step):
    while a < b:
        yield a
        a += step


if __name__ == "__main__":
    main()
