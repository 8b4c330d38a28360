#!/usr/bin/env python3
"""Checks a `cohort trace` file (issue 49) with Python's own JSON reader: the Chrome trace event
format's fields, nesting per thread, flow pairs, and optionally that every step of every rank has
its phases and that buckets ran inside or after backward.

  trace_check.py TRACE [--ranks N] [--steps FIRST LAST]

Prints one line per problem and exits 1 when there is one; prints a summary and exits 0 otherwise.
"""
import json
import sys
from collections import defaultdict

PHASES = ["data", "forward", "backward", "comm_wait", "optimizer"]
EPS = 0.002  # µs: the file's three decimals


def main():
    args = sys.argv[1:]
    path = args[0]
    ranks = int(args[args.index("--ranks") + 1]) if "--ranks" in args else None
    steps = None
    if "--steps" in args:
        i = args.index("--steps")
        steps = (int(args[i + 1]), int(args[i + 2]))
    problems = []
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        print("no traceEvents list")
        return 1
    names = {}  # (pid, tid) -> thread name; (pid, 0) -> process name
    spans = defaultdict(list)  # (pid, tid) -> X events
    flows = defaultdict(dict)  # id -> {"s": e, "f": e}
    for e in events:
        ph = e.get("ph")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int) or not isinstance(e.get("name"), str):
            problems.append("event without int pid/tid or str name: %r" % (e,))
            continue
        if ph == "M":
            if e["name"] in ("process_name", "thread_name"):
                if not isinstance(e.get("args", {}).get("name"), str):
                    problems.append("metadata without args.name: %r" % (e,))
                key = (e["pid"], 0 if e["name"] == "process_name" else e["tid"])
                names[key] = e["args"]["name"]
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or ts < 0 or dur < 0:
                problems.append("X event with bad ts/dur: %r" % (e,))
                continue
            if e.get("cat") not in ("compute", "comm", "io"):
                problems.append("X event with cat %r" % (e.get("cat"),))
            spans[(e["pid"], e["tid"])].append(e)
        elif ph in ("s", "f"):
            if not isinstance(e.get("id"), int) or not isinstance(e.get("ts"), (int, float)):
                problems.append("flow event without id/ts: %r" % (e,))
                continue
            if ph == "f" and e.get("bp") != "e":
                problems.append("flow end without bp=e: %r" % (e,))
            if ph in flows[e["id"]]:
                problems.append("flow %d has two %r events" % (e["id"], ph))
            flows[e["id"]][ph] = e
        else:
            problems.append("unexpected ph %r" % (ph,))
    for (pid, tid), xs in spans.items():
        if (pid, 0) not in names:
            problems.append("pid %d has no process_name" % pid)
        tname = names.get((pid, tid), "")
        if tname.split(" ")[0] not in ("compute", "comm", "io"):
            problems.append("pid %d tid %d is named %r" % (pid, tid, tname))
        for x in xs:
            if x["cat"] != tname.split(" ")[0]:
                problems.append("%s (%s) on thread %r" % (x["name"], x["cat"], tname))
        # Complete events on one thread nest: each starts after the enclosing one's start and ends before its end.
        stack = []
        for x in sorted(xs, key=lambda x: (x["ts"], -x["dur"])):
            while stack and stack[-1] <= x["ts"] + EPS:
                stack.pop()
            end = x["ts"] + x["dur"]
            if stack and end > stack[-1] + EPS:
                problems.append("pid %d tid %d: %s at %.3f..%.3f overlaps without nesting (enclosing ends %.3f)"
                                % (pid, tid, x["name"], x["ts"], end, stack[-1]))
            stack.append(end)

    def inside(e, xs):
        return any(x["ts"] - EPS <= e["ts"] <= x["ts"] + x["dur"] + EPS for x in xs)

    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            problems.append("flow %d lacks %s" % (fid, {"s", "f"} - set(pair)))
            continue
        s, f = pair["s"], pair["f"]
        if f["ts"] + EPS < s["ts"] or s["pid"] != f["pid"]:
            problems.append("flow %d goes back in time or across ranks" % fid)
        if not inside(f, [x for x in spans[(f["pid"], f["tid"])] if x["name"] == "bucket"]):
            problems.append("flow %d ends outside a bucket span" % fid)
        if not inside(s, spans[(s["pid"], s["tid"])]):
            problems.append("flow %d starts outside any span of its thread" % fid)

    # Per step and rank: the five phases, and the buckets inside or after backward, before the optimizer.
    by_step = defaultdict(lambda: defaultdict(list))  # (pid, step) -> name -> [X]
    for xs in spans.values():
        for x in xs:
            step = x.get("args", {}).get("step")
            if not isinstance(step, int):
                problems.append("X event without args.step: %r" % (x,))
                continue
            by_step[(x["pid"], step)][x["name"]].append(x)
    pids = sorted({pid for pid, _ in spans})
    if ranks is not None and pids != list(range(ranks)):
        problems.append("ranks %r, expected 0..%d" % (pids, ranks - 1))
    buckets = 0
    if steps:
        for pid in pids:
            for step in range(steps[0], steps[1] + 1):
                got = by_step.get((pid, step))
                if not got:
                    problems.append("rank %d has no spans of step %d" % (pid, step))
                    continue
                for name in PHASES:
                    if len(got.get(name, [])) != 1:
                        problems.append("rank %d step %d has %d %s spans" % (pid, step, len(got.get(name, [])), name))
                if any(len(got.get(n, [])) != 1 for n in PHASES):
                    continue
                ph = {n: got[n][0] for n in PHASES}
                for a, b in zip(PHASES, PHASES[1:]):  # they telescope
                    if abs(ph[a]["ts"] + ph[a]["dur"] - ph[b]["ts"]) > 1.0:
                        problems.append("rank %d step %d: %s does not end where %s begins" % (pid, step, a, b))
                backward_start = ph["backward"]["ts"]
                wait_end = ph["comm_wait"]["ts"] + ph["comm_wait"]["dur"]
                for b in got.get("bucket", []):
                    buckets += 1
                    if b["ts"] < backward_start - 1.0 or b["ts"] + b["dur"] > wait_end + 1.0:
                        problems.append("rank %d step %d: bucket %r at %.3f..%.3f outside backward %.3f..wait end %.3f"
                                        % (pid, step, b.get("args", {}).get("index"), b["ts"], b["ts"] + b["dur"],
                                           backward_start, wait_end))
                if not got.get("bucket"):
                    problems.append("rank %d step %d has no bucket span" % (pid, step))
    for p in problems[:20]:
        print(p)
    if problems:
        print("%d problems" % len(problems))
        return 1
    print("ok: %d events, %d ranks, %d flows, %d buckets checked" % (len(events), len(pids), len(flows), buckets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
