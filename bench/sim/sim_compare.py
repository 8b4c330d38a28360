#!/usr/bin/env python3
"""The table of bench/sim/sim_predict.sh and bench/sim/sim_netns.sh: `cohort sim predict --json` output,
grouped by job size (KEY: "world" or "nodes"); per size the median of the measured step times (and
each round's) against the prediction; sizes not in FITTED (a comma-separated list, "2," for 2
alone; one number N means 1..N) are the predicted ones, and the last line is the worst error among those at a thread count the
calibration saw (predict's threads_fitted; a size at another count is marked, its compute a guess).
usage: sim_compare.py PREDICTED.json KEY NOUN FITTED"""
import json
import statistics
import sys

path, key, noun = sys.argv[1], sys.argv[2], sys.argv[3]
fitted = {int(x) for x in sys.argv[4].split(",") if x}
if len(fitted) == 1 and "," not in sys.argv[4]:
    fitted = set(range(1, max(fitted) + 1))
runs_all = json.load(open(path))
worst = 0.0
for size in sorted({r[key] for r in runs_all}):
    runs = [r for r in runs_all if r[key] == size]
    measured = [r["measured_step_s"] * 1000 for r in runs]
    m, p = statistics.median(measured), runs[0]["predicted_step_s"] * 1000
    guessed = not all(r.get("threads_fitted", True) for r in runs)
    if size not in fitted and not guessed:
        worst = max(worst, abs(p / m - 1))
    print(f'{size} {noun} ({"fitted" if size in fitted else "predicted"}): step {m:.1f} ms measured (median of {len(runs)}: '
          f'{", ".join(f"{x:.1f}" for x in measured)}), {p:.1f} ms predicted ({(p / m - 1) * 100:+.1f} %)'
          + ("  [a thread count the fit never saw: its compute guessed]" if guessed else ""))
print(f'worst error against the medians of the predicted sizes at fitted thread counts: {worst * 100:.1f} %')
