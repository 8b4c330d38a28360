#!/usr/bin/env python3
"""The table of bench/sim/sim_predict.sh and bench/sim/sim_netns.sh: `cohort sim predict --json` output,
grouped by job size (KEY: "world" or "nodes"); per size the median of the measured step times (and
each round's) against the prediction; sizes above FITTED are the predicted ones, and the last line
is the worst error among them.
usage: sim_compare.py PREDICTED.json KEY NOUN FITTED"""
import json
import statistics
import sys

path, key, noun, fitted = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs_all = json.load(open(path))
worst = 0.0
for size in sorted({r[key] for r in runs_all}):
    runs = [r for r in runs_all if r[key] == size]
    measured = [r["measured_step_s"] * 1000 for r in runs]
    m, p = statistics.median(measured), runs[0]["predicted_step_s"] * 1000
    if size > fitted:
        worst = max(worst, abs(p / m - 1))
    print(f'{size} {noun} ({"fitted" if size <= fitted else "predicted"}): step {m:.1f} ms measured (median of {len(runs)}: '
          f'{", ".join(f"{x:.1f}" for x in measured)}), {p:.1f} ms predicted ({(p / m - 1) * 100:+.1f} %)')
print(f'worst error against the medians of the predicted sizes: {worst * 100:.1f} %')
